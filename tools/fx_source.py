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
import sys
import types
from collections.abc import Callable, Sequence
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


# Tensor factories that take only Python values: FX runs them while tracing and keeps their
# result as a constant. With ``factories`` they are recorded as calls instead.
FACTORIES = ("arange", "zeros", "ones", "full", "empty", "linspace", "logspace", "eye", "tensor")


def trace(
    model: torch.nn.Module,
    concrete_args: dict[str, Any] | None = None,
    meta_inputs: list[Any] | None = None,
    factories: bool = False,
) -> torch.fx.GraphModule:
    """``symbolic_trace`` with buffers traced as attributes (not baked in as constants), so a
    forward may slice a buffer by a traced size (minGPT's ``self.bias[:, :, :T, :T]``), and
    ``torch.finfo`` of a traced dtype recorded as a call (transformers fill masks with
    ``torch.finfo(scores.dtype).min``, which plain tracing cannot evaluate).

    When that fails and ``meta_inputs`` (the forward's inputs on the meta device) are given,
    the forward is traced again with every value's shape known as it is traced (FX's
    ``MetaTracer``): code that unpacks a shape (``(*x.shape[:-1], -1, d)``, ``b, c, h, w =
    q.shape`` then ``int(c)``), as transformers' and diffusers' models do, then traces, with
    those sizes written into the graph as the numbers they are for the task's inputs.

    ``factories``: the model's own calls of FACTORIES are recorded as nodes, so the graph makes
    those tensors when it runs, as the forward does. Without it a forward that builds a large
    table from sizes (RAFT's coordinate grid, 56,320 floats) leaves a constant that no code can
    name. Only calls from the model's own source files are recorded: PyTorch's internals make
    tensors too while the tracer computes shapes."""
    # the tracer sets the tensor constants it makes (``torch.tensor(2.0)`` in the forward) on its
    # root: a shallow copy keeps them off the model, so ``model`` still says what ModelNew has
    model = copy.copy(model)
    try:
        return _trace(
            model, torch.fx.Tracer, lambda tracer: tracer.trace(model, concrete_args), factories=factories
        )
    except Exception:
        if meta_inputs is None:
            raise
    names = list(inspect.signature(model.forward).parameters)
    meta = {n: x for n, x in zip(names, meta_inputs, strict=False) if isinstance(x, torch.Tensor)}
    constant = {n: x for n, x in zip(names, meta_inputs, strict=False) if n not in meta}
    return _trace(
        model,
        _meta_tracer,
        lambda tracer: tracer.trace(
            model, meta_args=meta, concrete_args={**constant, **(concrete_args or {})} or None
        ),
        factories=factories,
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
    model: torch.nn.Module,
    new_tracer: Callable[[], Any],
    run: Callable[[Any], torch.fx.Graph],
    factories: bool = False,
) -> torch.fx.GraphModule:
    """``run`` with a new tracer; the module state the forward wrote is put back (below)."""
    if factories:
        run = _recording_factories(model, run)
    tracer, graph, written = _run(model, new_tracer, run)
    kept = [(path, name) for path, name, existed in written if existed]
    if kept:
        # The forward assigned attributes that held a value before it ran. If it reads the old
        # value first (KernelBench's vanilla RNN: ``self.hidden = tanh(... self.hidden ...)``),
        # the graph cannot carry it to the next call. Traced again without them, such a read fails.
        try:
            tracer, graph, _ = _run(model, new_tracer, run, hide=kept)
        except Exception as err:
            where = ".".join(["self", *[part for part in kept[0] if part]])
            raise torch.fx.proxy.TraceError(
                f"the forward assigns {where}, module state kept across calls that it reads "
                "before it assigns: a traced graph would drop that assignment"
            ) from err
    return torch.fx.GraphModule(tracer.root, graph, model.__class__.__name__)


def _recording_factories(
    model: torch.nn.Module, run: Callable[[Any], torch.fx.Graph]
) -> Callable[[Any], torch.fx.Graph]:
    """``run`` with the model's own calls of FACTORIES recorded as graph nodes. A call counts as
    the model's when the nearest caller outside FX's MetaTracer (which wraps some factories
    itself) is in a file that defines one of the model's modules."""
    from torch.fx.experimental import meta_tracer

    files = {inspect.getsourcefile(type(m)) for m in model.modules()} - {None}
    tracer_file = meta_tracer.__file__

    def recorded(tracer: Any) -> torch.fx.Graph:
        made = {name: getattr(torch, name) for name in FACTORIES}

        def record(factory: Callable[..., Any]) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                frame = sys._getframe(1)
                while frame.f_back is not None and frame.f_code.co_filename == tracer_file:
                    frame = frame.f_back
                if frame.f_code.co_filename not in files:
                    return factory(*args, **kwargs)
                return tracer.create_proxy("call_function", factory, args, kwargs)

            return call

        for name, factory in made.items():
            setattr(torch, name, record(factory))
        try:
            return run(tracer)
        finally:
            for name, factory in made.items():
                setattr(torch, name, factory)

    return recorded


def _run(
    model: torch.nn.Module,
    new_tracer: Callable[[], Any],
    run: Callable[[Any], torch.fx.Graph],
    hide: Sequence[tuple[str, str]] = (),
) -> tuple[Any, torch.fx.Graph, list[tuple[str, str, bool]]]:
    """(tracer, graph, the attributes the forward assigned traced values to: module path, name
    and whether it held a value before). Those assignments are undone, traced or not: a module
    left holding a tracing proxy adds nodes to the next graph that reads it. ``hide``: (module
    path, name) of attributes removed while it runs. The graph drops the assignments: what the forward wrote and read back within one
    call (PatchTST's RevIN keeps its statistics on ``self`` from ``norm`` to ``denorm``) is an
    edge of the graph; a value the forward only writes is not an output (KernelBench compares
    outputs), and the candidate that the graph becomes has no such attribute."""
    before = {path: dict(vars(module)) for path, module in model.named_modules()}
    for path, name in hide:
        vars(model.get_submodule(path)).pop(name, None)
    tracer = new_tracer()
    tracer.proxy_buffer_attributes = True
    finfo = torch.finfo

    def traced_finfo(*args: Any, **kwargs: Any) -> Any:
        if any(isinstance(a, torch.fx.Proxy) for a in (*args, *kwargs.values())):
            return tracer.create_proxy("call_function", finfo, args, kwargs)
        return finfo(*args, **kwargs)

    torch.finfo = traced_finfo  # type: ignore[assignment,misc]
    try:
        graph = run(tracer)
    finally:
        torch.finfo = finfo  # type: ignore[misc]
        written = _put_back(model, before)
    return tracer, graph, written


def _put_back(model: torch.nn.Module, before: dict[str, dict[str, Any]]) -> list[tuple[str, str, bool]]:
    """Each attribute the forward assigned a traced value to, as it was in ``before`` (removed
    where it had none): (module path, name, held a value before) of each. Other attributes stay as the run
    left them (the tracer keeps the constants it makes on the root, ``_tensor_constant0``; the
    ones ``hide`` removed come back here)."""
    written = []
    for path, module in model.named_modules():
        state, old = vars(module), before.get(path, {})
        for name, value in list(state.items()):
            if isinstance(value, torch.fx.Proxy):
                written.append((path, name, name in old))
                del state[name]
        state.update({n: v for n, v in old.items() if n not in state})
    return written


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
