"""A region of the user's model written as a KernelBench-format task, and checked.

The region's forward is traced with FX (``torch.nn`` layers stay calls of layers), its
tensor arguments become ``get_inputs()`` at their real shapes and dtypes, and its other
arguments are fixed to the values it was called with. ``Model.__init__`` rebuilds the
layers from their constructor arguments and holds every other parameter and buffer the
forward reads, at the same names as in the user's module, so that a verified ``ModelNew``
loads the user's weights as they are (:mod:`.patch`). Parameters are drawn at the real
ones' mean and spread; small buffers (masks, tables) keep their values.

The written task is checked before it is kept: built, loaded with the region's own weights
and run on the region's recorded arguments, it must give the region's output.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from pathlib import Path
from typing import Any

import torch
import torch.fx

from ..fx_source import SourceError, emit
from ..task import import_file
from ..trees import flatten
from .capture import CaptureError, export_graph, first_line, fx_graph
from .regions import Call

MAX_LITERAL = 4096  # a buffer up to this many elements is written out with its values
HEADER = '''"""{doc}"""

import math
import operator

import torch
import torch.nn as nn
{prelude}


def _draw(shape, mean, std, dtype=torch.float32):
    """A parameter drawn at the real one's mean and spread."""
    return nn.Parameter(torch.randn(shape, dtype=torch.float32).mul_(std).add_(mean).to(dtype))


def _redraw(t, mean, std, positive=False):
    """A layer's parameter or buffer drawn again at the real one's mean and spread (positive: a variance)."""
    with torch.no_grad():
        drawn = torch.randn(t.shape).mul_(std).add_(mean)
        t.copy_(drawn.abs() if positive else drawn)
'''


class ExtractError(ValueError):
    """The region cannot be written as a task; the message says why, in one line."""


@dataclasses.dataclass
class Extracted:
    source: str
    inputs: list[str]  # the forward's tensor arguments, in get_inputs() order
    fixed: dict[str, str]  # the other arguments, fixed: name -> repr
    shapes: dict[str, list[Any]]  # each tensor argument's [shape, dtype]
    groups: dict[str, list[str]]  # an argument that is a tuple of tensors -> its tensors' names


def bind(
    module: torch.nn.Module, call: Call, groups: dict[str, list[str]] | None = None
) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """(tensor argument names in order, their values, the other arguments) of ``call``; what
    came through ``**kwargs`` is named as given, a tuple of tensors ``a`` as ``a_0``, ``a_1``,
    ... (recorded in ``groups``)."""
    signature = inspect.signature(module.forward)
    try:
        bound = signature.bind(*call.args, **call.kwargs)
    except TypeError as err:
        raise ExtractError(f"its call does not fit its forward's signature: {err}") from None
    names, tensors, fixed = [], {}, {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            if value:
                raise ExtractError(f"its forward takes *{name} and was given {len(value)} values")
            continue
        for key, item in value.items() if kind is inspect.Parameter.VAR_KEYWORD else [(name, value)]:
            if isinstance(item, torch.Tensor):
                names.append(key)
                tensors[key] = item
            elif isinstance(item, tuple | list) and item and all(isinstance(x, torch.Tensor) for x in item):
                parts = [f"{key}_{i}" for i in range(len(item))]
                names += parts
                tensors |= dict(zip(parts, item, strict=True))
                if groups is None:
                    raise ExtractError(f"argument {key!r} is a tuple of tensors")
                groups[key] = parts
            elif any(isinstance(x, torch.Tensor) for x in flatten(item)):
                raise ExtractError(f"argument {key!r} holds tensors inside a {type(item).__name__}")
            else:
                fixed[key] = _literal_value(item, key)
    return names, tensors, fixed


def _literal_value(value: Any, name: str) -> Any:
    """``value`` when its repr gives it back (a patch compares calls by it), else ExtractError."""
    _literal(value, name)
    return value


def extract(module: torch.nn.Module, call: Call, doc: str) -> Extracted:
    """The task source of ``module`` called as in ``call``. Raises ExtractError."""
    groups: dict[str, list[str]] = {}
    names, tensors, fixed = bind(module, call, groups)
    if not names:
        raise ExtractError("it takes no tensor argument")
    if is_layer(module) and next(module.children(), None) is None and not groups:
        prelude, base, init, forward = (
            "",
            _layer_base(module),
            _layer_init(module),
            _layer_forward(names, fixed),
        )
    else:
        prelude, forward, init = _traced(module, names, tensors, fixed, groups)
        base = "nn.Module"
    body = "\n".join(
        [
            HEADER.format(doc=doc, prelude=prelude),
            "",
            f"class Model({base}):",
            "    def __init__(self):",
            *[f"        {line}" for line in init],
            "        self.eval()  # as the model ran: inference (BatchNorm's running statistics, no dropout)",
            "",
            _indent(forward),
            "",
            "",
            "def get_inputs():",
            f"    return [{', '.join(_input_expr(tensors[n]) for n in names)}]",
            "",
            "",
            "def get_init_inputs():",
            "    return []",
            "",
        ]
    )
    shapes = {n: [list(tensors[n].shape), str(tensors[n].dtype)] for n in names}
    return Extracted(
        source=body, inputs=names, fixed={k: repr(v) for k, v in fixed.items()}, shapes=shapes, groups=groups
    )


def _traced(
    module: torch.nn.Module,
    names: list[str],
    tensors: dict[str, Any],
    fixed: dict[str, Any],
    groups: dict[str, list[str]],
) -> tuple[str, str, list[str]]:
    """(prelude, forward, __init__ lines) of the region's graph: FX's, else torch.export's."""
    try:
        if groups:
            raise CaptureError(f"FX cannot trace it: argument {next(iter(groups))!r} is a tuple of tensors")
        gm = fx_graph(module, names, fixed)
    except CaptureError as fx_err:
        try:
            gm = export_graph(module, names, tensors, fixed, groups)
        except CaptureError as export_err:
            raise ExtractError(f"{fx_err}; {export_err}") from None
    try:
        prelude, forward = emit(gm)
    except SourceError as err:
        raise ExtractError(str(err)) from None
    return prelude, forward, ["super().__init__()", *_init_lines(gm, module)]


def is_layer(module: torch.nn.Module) -> bool:
    """Whether ``module`` is a ``torch.nn`` layer (rebuilt from its constructor arguments)."""
    return getattr(torch.nn, type(module).__name__, None) is type(module)


def _layer_base(layer: torch.nn.Module) -> str:
    layer_expr(layer, "the region")  # checks that its repr rebuilds it
    return f"nn.{type(layer).__name__}"


def _layer_init(layer: torch.nn.Module) -> list[str]:
    """A ``torch.nn`` layer as the task's Model: its constructor, then its state redrawn."""
    args = layer_expr(layer, "the region").removeprefix(f"nn.{type(layer).__name__}(").rsplit(")", 1)[0]
    return [f"super().__init__({args})", *_redraw_lines(layer, "")]


def _layer_forward(names: list[str], fixed: dict[str, Any]) -> str:
    given = [f"{n}={n}" for n in names] + [f"{k}={_literal(v, k)}" for k, v in fixed.items()]
    return f"def forward(self, {', '.join(names)}):\n    return super().forward({', '.join(given)})\n"


def _literal(value: Any, name: str) -> str:
    text = repr(value)
    try:
        if eval(text, {"torch": torch}) != value:  # noqa: S307 (a repr we made)
            raise ValueError
    except Exception:
        raise ExtractError(f"argument {name!r} ({type(value).__name__}) has no literal form") from None
    return text


def _redraw_lines(layer: torch.nn.Module, prefix: str) -> list[str]:
    """Lines that redraw a rebuilt layer's floating parameters and buffers at the real ones'
    mean and spread: a constructor's ones and zeros would let a candidate that drops an
    affine term or the running statistics pass verification."""
    lines = []
    owner = _owner(prefix)
    for name, t in [*layer.named_parameters(recurse=False), *layer.named_buffers(recurse=False)]:
        if t is None or not t.is_floating_point() or not t.numel():
            continue
        data = t.detach().float()
        std = (float(data.std()) if data.numel() > 1 else 0.0) or 0.02
        positive = bool((data >= 0).all()) and name.endswith("var")
        lines.append(
            f"_redraw({owner}.{name}, {float(data.mean()):.6g}, {std:.6g}{', positive=True' if positive else ''})"
        )
    return lines


def check(path: Path, module: torch.nn.Module, call: Call, inputs: list[str]) -> None:
    """The task at ``path``, loaded with the region's weights, gives the region's output on
    the recorded arguments. Raises ExtractError."""
    try:
        task = import_file(path, f"kforge_region_{path.stem}")
        built = task.Model()
    except Exception as err:  # the written source: a name or a rebuilt layer that does not work
        raise ExtractError(
            f"the written task does not load: {type(err).__name__}: {first_line(err)}"
        ) from None
    missing = load_region_state(built, module)
    if missing:
        raise ExtractError(f"the rebuilt task lacks {missing[0]!r} of the region's state")
    built = built.to(next(iter(_tensors(module)), torch.empty(0)).device).eval()
    _, tensors, _ = bind(module, call, {})
    with torch.no_grad():
        want = flatten(module(*call.args, **call.kwargs))
        got = flatten(built(*[tensors[n] for n in inputs]))
    if len(want) != len(got):
        raise ExtractError(f"the task returns {len(got)} values, the region {len(want)}")
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        if isinstance(b, torch.Tensor) and not (
            isinstance(a, torch.Tensor) and a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-6)
        ):
            raise ExtractError(f"the rebuilt task's output {i} differs from the region's")


def load_region_state(target: torch.nn.Module, region: torch.nn.Module, assign: bool = False) -> list[str]:
    """Load the region's parameters and buffers into ``target`` by name; returns the names
    ``target`` has that the region lacks (nothing is loaded then)."""
    theirs = dict(region.named_parameters()) | dict(region.named_buffers())
    mine = target.state_dict()
    missing = [k for k in mine if k not in theirs or theirs[k].shape != mine[k].shape]
    if missing:
        return missing
    target.load_state_dict({k: theirs[k] for k in mine}, strict=True, assign=assign)
    return []


def _tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    return [*module.parameters(), *module.buffers()]


def _init_lines(gm: torch.fx.GraphModule, region: torch.nn.Module) -> list[str]:
    """``__init__`` lines that rebuild what the forward reads: layers, parameters, buffers."""
    lines: list[str] = []
    containers: set[str] = set()
    layers: set[str] = set()
    targets = [(n.op, str(n.target)) for n in gm.graph.nodes if n.op in ("call_module", "get_attr")]
    for op, target in dict.fromkeys(targets):
        if any(target == m or target.startswith(m + ".") for m in layers):
            continue  # the layer itself, or inside a layer already rebuilt
        parts = target.split(".")[:-1]
        for i in range(len(parts)):
            prefix = ".".join(parts[: i + 1])
            if prefix not in containers:
                lines.append(_set(prefix, "nn.Module()", "add_module"))
                containers.add(prefix)
        obj = region.get_submodule(target) if op == "call_module" else _attr(region, target, gm)
        if isinstance(obj, torch.nn.Module):
            lines.append(_set(target, layer_expr(obj, target), "add_module"))
            lines += _redraw_lines(obj, target)
        elif isinstance(obj, torch.nn.Parameter):
            lines.append(_set(target, _param_expr(obj), "register_parameter"))
        elif isinstance(obj, torch.Tensor):
            lines.append(_set(target, buffer_expr(obj, target), "register_buffer", always=True))
        else:
            raise ExtractError(f"{target!r} is a {type(obj).__name__}, not a layer or a tensor")
        if op == "call_module" or isinstance(obj, torch.nn.Module):
            layers.add(target)
    return lines or ["pass"]


def _set(target: str, expr: str, method: str, always: bool = False) -> str:
    """``self.a.b = expr`` where every part is a name, else ``owner.method("b", expr)``
    (a Sequential's children are named 0, 1, ...; a buffer needs register_buffer)."""
    owner, _, name = target.rpartition(".")
    if not always and all(part.isidentifier() for part in target.split(".")):
        return f"self.{target} = {expr}"
    return f"{_owner(owner)}.{method}({name!r}, {expr})"


def _owner(path: str) -> str:
    """Source for the module at ``path`` inside ``self``."""
    if not path:
        return "self"
    return (
        f"self.{path}" if all(p.isidentifier() for p in path.split(".")) else f"self.get_submodule({path!r})"
    )


def layer_expr(layer: torch.nn.Module, where: str) -> str:
    """Constructor source of a ``torch.nn`` layer, from its repr, checked by building it."""
    cls = type(layer)
    if getattr(torch.nn, cls.__name__, None) is not cls:
        raise ExtractError(f"{where}: {cls.__qualname__} is not a torch.nn layer")
    if isinstance(layer, torch.nn.MultiheadAttention):
        expr = (
            f"nn.MultiheadAttention({layer.embed_dim}, {layer.num_heads}, dropout={layer.dropout}, "
            f"bias={layer.in_proj_bias is not None}, add_bias_kv={layer.bias_k is not None}, "
            f"kdim={layer.kdim}, vdim={layer.vdim}, batch_first={layer.batch_first})"
        )
    else:
        expr = f"nn.{cls.__name__}({layer.extra_repr()})"
    try:
        built = eval(expr, {"nn": torch.nn, "torch": torch, "inf": math.inf})  # noqa: S307 (our own repr)
    except Exception as err:
        raise ExtractError(
            f"{where}: {cls.__name__} cannot be rebuilt from {expr!r}: {first_line(err)}"
        ) from None
    same = repr(built) == repr(layer) and {k: v.shape for k, v in built.state_dict().items()} == {
        k: v.shape for k, v in layer.state_dict().items()
    }
    if not same:
        raise ExtractError(f"{where}: {expr} does not rebuild the layer")
    dtype = next(iter(_tensors(layer)), None)
    if dtype is not None and dtype.dtype != torch.float32:
        expr += f".to({dtype.dtype})"
    return expr


def _param_expr(p: torch.Tensor) -> str:
    data = p.detach().float()
    mean = float(data.mean()) if data.numel() else 0.0
    std = float(data.std()) if data.numel() > 1 else 0.0
    std = std or 0.02  # a constant one (zero biases, unit norms) gets some spread: a candidate
    # that ignores it must fail verification
    return f"_draw({tuple(p.shape)}, {mean:.6g}, {std:.6g}, {p.dtype})"


def buffer_expr(b: torch.Tensor, where: str) -> str:
    """A buffer's value as source: written out when small, a causal mask or a constant as
    such; a large float buffer drawn at its mean and spread."""
    data = b.detach().cpu()
    shape, dtype = tuple(data.shape), data.dtype
    if data.numel() <= MAX_LITERAL:
        return f"torch.tensor({data.tolist()!r}, dtype={dtype})"
    if data.numel() and bool((data == data.flatten()[0]).all()):
        return f"torch.full({shape}, {data.flatten()[0].item()!r}, dtype={dtype})"
    if data.dim() >= 2:
        tril = torch.tril(torch.ones(data.shape[-2:], dtype=dtype)).expand(shape)
        if torch.equal(data, tril):
            return f"torch.tril(torch.ones({tuple(data.shape[-2:])}, dtype={dtype})).expand({shape}).clone()"
    if data.is_floating_point():
        return (
            f"_draw({shape}, {float(data.float().mean()):.6g}, {float(data.float().std()):.6g}, {dtype}).data"
        )
    raise ExtractError(f"{where}: a {data.numel()}-element {dtype} buffer that is not a mask or a constant")


def _input_expr(x: torch.Tensor) -> str:
    shape = tuple(x.shape)
    if x.is_floating_point():
        return f"torch.randn({shape}, dtype={x.dtype})"
    if x.dtype == torch.bool:
        return f"torch.rand({shape}) < {float(x.float().mean()):.3g}"
    low, high = (int(x.min()), int(x.max()) + 1) if x.numel() else (0, 1)
    return f"torch.randint({low}, {high}, {shape}, dtype={x.dtype})"


def _attr(root: torch.nn.Module, target: str, graph: torch.nn.Module | None = None) -> Any:
    """``root``'s attribute at ``target``; else ``graph``'s (a constant the capture lifted)."""
    obj: Any = root
    for part in target.split("."):
        if not hasattr(obj, part) and graph is not None:
            return _attr(graph, target)
        obj = getattr(obj, part)
    return obj


def _indent(src: str) -> str:
    return "\n".join(("    " + line) if line.strip() else "" for line in src.strip("\n").split("\n"))
