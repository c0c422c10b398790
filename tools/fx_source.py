"""An FX graph written back as Python source: the forward's code and the lines it needs
before it (imports of wrapped functions, ``inf``). Used where a traced graph becomes a file
a person reads and the evaluator imports: the policy's FX rewrites and the regions that
``kforge model`` cuts out of a user's model."""

from __future__ import annotations

import builtins
import copy
import importlib
import inspect
import operator
import re
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

STANDARD_GLOBALS = {"torch", "inf", "nan", "NoneType", "device", "fx_pytree", "pytree"}
GLOBAL_DEFS = {
    "inf": "inf = float('inf')",
    "nan": "nan = float('nan')",
    "NoneType": "NoneType = type(None)",
    "device": "device = torch.device",
}


class SourceError(ValueError):
    """The graph's code names something a source file cannot import."""


def trace(
    model: torch.nn.Module,
    concrete_args: dict[str, Any] | None = None,
    meta_inputs: list[Any] | None = None,
) -> torch.fx.GraphModule:
    """``symbolic_trace`` with buffers traced as attributes (not baked in as constants), so a
    forward may slice a buffer by a traced size (minGPT's ``self.bias[:, :, :T, :T]``), and
    ``torch.finfo`` of a traced dtype recorded as a call (transformers fill masks with
    ``torch.finfo(scores.dtype).min``, which plain tracing cannot evaluate).

    When that fails and ``meta_inputs`` (the forward's inputs on the meta device) are given,
    the forward is traced again with every value's shape known as it is traced (FX's
    ``MetaTracer``): code that unpacks a shape (``(*x.shape[:-1], -1, d)``, ``b, c, h, w =
    q.shape`` then ``int(c)``), as transformers' and diffusers' models do, then traces, with
    those sizes written into the graph as the numbers they are for the task's inputs."""
    # the tracer sets the tensor constants it makes (``torch.tensor(2.0)`` in the forward) on its
    # root: a shallow copy keeps them off the model, so ``model`` still says what ModelNew has
    model = copy.copy(model)
    try:
        tracer = torch.fx.Tracer()
        return _trace(tracer, model, lambda: tracer.trace(model, concrete_args))
    except Exception:
        if meta_inputs is None:
            raise
    names = list(inspect.signature(model.forward).parameters)
    meta = {n: x for n, x in zip(names, meta_inputs, strict=False) if isinstance(x, torch.Tensor)}
    constant = {n: x for n, x in zip(names, meta_inputs, strict=False) if n not in meta}
    meta_tracer = _meta_tracer()
    return _trace(
        meta_tracer,
        model,
        lambda: meta_tracer.trace(
            model, meta_args=meta, concrete_args={**constant, **(concrete_args or {})} or None
        ),
    )


def _meta_tracer() -> Any:
    """FX's MetaTracer, with ``x.size(0)`` an int: FX's own reads dim 0 as no dim (``if dim``)
    and gives the whole shape (DeBERTa's ``query_layer.size(0) // heads`` failed on it);
    ``x.ndim`` an int, as ``x.dim()`` is (diffusers' ``if tensor.ndim == 3`` failed on it); and a
    tuple of known length iterable (``for part in x.chunk(n)``)."""
    from torch.fx.experimental.meta_tracer import MetaProxy, MetaTracer

    class SizedProxy(MetaProxy):
        def size(self, dim: int | None = None) -> Any:
            if hasattr(self, "_tensor_meta") and self._tensor_meta is not None:
                return self._tensor_meta.size() if dim is None else self._tensor_meta.size(dim)
            args = (self,) if dim is None else (self, dim)
            return self.tracer.create_proxy("call_method", "size", args, {})

        @property
        def ndim(self) -> Any:
            if hasattr(self, "_tensor_meta") and self._tensor_meta is not None:
                return self._tensor_meta.ndim
            return self.tracer.create_proxy("call_function", getattr, (self, "ndim"), {})

        def __setitem__(self, key: Any, value: Any) -> None:
            # item assignment, recorded as operator.setitem (FX keeps it: side-effectful):
            # transformers' mask builders write their masks so (Mistral's, unseen8)
            self.tracer.create_proxy("call_function", operator.setitem, (self, key, value), {})

        def __iter__(self) -> Any:
            # a tuple of known length (``x.chunk(n)``, ``x.split(k)``, ``x.unbind()``): its
            # items, so a loop over them traces (MaskNet's fields, fairseq's experts)
            known = getattr(self, "_tensor_meta", None)
            if isinstance(known, tuple | list):
                return iter([self[i] for i in range(len(known))])  # type: ignore[index]
            return super().__iter__()

    class Tracer(MetaTracer):
        def proxy(self, node: torch.fx.Node) -> MetaProxy:
            return SizedProxy(node, self)

    return Tracer()


def _trace(
    tracer: torch.fx.Tracer, model: torch.nn.Module, run: Callable[[], torch.fx.Graph]
) -> torch.fx.GraphModule:
    tracer.proxy_buffer_attributes = True
    finfo = torch.finfo

    def traced_finfo(*args: Any, **kwargs: Any) -> Any:
        if any(isinstance(a, torch.fx.Proxy) for a in (*args, *kwargs.values())):
            return tracer.create_proxy("call_function", finfo, args, kwargs)
        return finfo(*args, **kwargs)

    torch.finfo = traced_finfo  # type: ignore[assignment,misc]
    try:
        graph = run()
    finally:
        torch.finfo = finfo  # type: ignore[misc]
    _refuse_state(tracer.root)
    return torch.fx.GraphModule(tracer.root, graph, model.__class__.__name__)


def _refuse_state(root: torch.nn.Module) -> None:
    """Raise where the forward assigned a traced value to an attribute (KernelBench's vanilla
    RNN: ``self.hidden = self.tanh(...)``): the graph has no way to write module state, so it
    would drop the assignment, and the traced module would hold a tracing proxy under that name
    (read back as one, it adds nodes to the graph instead of giving a value)."""
    for path, module in root.named_modules():
        for name, value in vars(module).items():
            if isinstance(value, torch.fx.Proxy):
                where = f"{path}.{name}" if path else name
                raise torch.fx.proxy.TraceError(
                    f"the forward assigns self.{where}, module state kept across calls: a traced "
                    "graph would drop that assignment"
                )


def emit(gm: torch.fx.GraphModule, helpers: dict[str, Callable[..., Any]] | None = None) -> tuple[str, str]:
    """(prelude, ``def forward(self, ...)`` source) of ``gm``; ``helpers`` name functions the
    prelude of the file defines itself. Raises :class:`SourceError`."""
    code = gm.graph.python_code(root_module="self")
    src = code.src
    prelude = []
    by_function = {id(fn): name for name, fn in (helpers or {}).items()}
    for name, obj in code.globals.items():
        if id(obj) in by_function:
            src = re.sub(rf"\b{re.escape(name)}\b", by_function[id(obj)], src)
        elif name in GLOBAL_DEFS:
            prelude.append(GLOBAL_DEFS[name])
        elif getattr(builtins, name, None) is obj:
            continue  # getattr, for x.T: a builtin the emitted code names as it is
        elif isinstance(obj, types.ModuleType) and name not in STANDARD_GLOBALS:
            prelude.append(f"import {obj.__name__} as {name}")
        elif importable(obj):  # a wrapped function, e.g. math.sqrt of a size as math_sqrt
            prelude.append(f"from {obj.__module__} import {obj.__name__} as {name}")
        elif name not in STANDARD_GLOBALS:
            raise SourceError(
                f"the traced code names {name!r} ({type(obj).__name__}), which no import gives back"
            )
    src = src[src.index("def forward(self") :]  # after fx's wrap() lines for wrapped functions
    return "\n".join(prelude), src.strip("\n") + "\n"


def importable(obj: Any) -> bool:
    """Whether ``from obj.__module__ import obj.__name__`` gives ``obj`` back."""
    module, name = getattr(obj, "__module__", None), getattr(obj, "__name__", None)
    if not module or not name or module == "builtins":
        return False
    try:
        return getattr(importlib.import_module(module), name) is obj
    except ImportError:
        return False
