"""Algebraic rewrites on the FX graph of the task's forward, emitted as source.

The forward is traced symbolically on the meta device with shapes propagated; each pass
rewrites a pattern that computes the same function with less work:

- ``sum(linear(x) * c, dim=-1)`` -> ``linear(x, W.sum(0), b.sum()) * c``: the sum over a
  GEMM's output features moves onto the weight, turning an (M, N, K) GEMM into a GEMV;
- ``diag(a) @ B`` -> ``a[:, None] * B`` and ``B @ diag(a)`` -> ``B * a``;
- ``(A @ B) @ C`` -> ``A @ (B @ C)`` when that needs fewer FLOPs;
- ``x * 1``, ``x / 1``, ``x + 0`` and ``transpose(transpose(x, i, j), i, j)`` removed;
- a gathered embedding table contracted with queries or weights -> the contraction on the
  table, then a gather or after a scatter-add (:mod:`.fx_gathers`: TiSASRec's time intervals),
  and a Linear of gathered rows -> the Linear of the rows, then the gather (EGNN's edge MLP);
- attention written out by hand -> ``scaled_dot_product_attention`` (:mod:`.fx_attention`).

The rewritten graph's code becomes ``ModelNew._kforge_body``; only tasks where some pass
fired get a candidate.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from kforge.tools.fx_source import SourceError, emit, trace

from . import fx_attention, fx_constants, fx_gathers, fx_inplace
from .source import Body, Spec

Node = torch.fx.Node
MATMULS = (torch.matmul, torch.mm, operator.matmul)
SCALE_OPS = (operator.mul, operator.truediv, torch.mul, torch.div)


class Unwritable(ValueError):
    """The rewritten forward cannot be written as the candidate's code: it names a global the
    file cannot import, or a tensor the tracer made that ModelNew has no attribute for. Every
    rewrite of the same forward meets it, so the analysis says it once."""


class _Shapes(torch.fx.Interpreter):
    """Shape propagation on meta tensors (quiet: a failure raises, nothing is printed)."""

    def run_node(self, n: Node) -> Any:
        result = super().run_node(n)
        if isinstance(result, torch.Tensor):
            n.meta["tensor_meta"] = result
        elif isinstance(result, int | float) and not isinstance(result, bool):
            n.meta["scalar"] = True  # a size, or math of sizes: fixed for the task's shapes
        return result


def meta(node: Any) -> torch.Tensor | None:
    """The value shape propagation recorded for ``node`` (a meta tensor), or None."""
    value = node.meta.get("tensor_meta") if isinstance(node, Node) else None
    return value if isinstance(value, torch.Tensor) else None


def _shape(node: Any) -> tuple[int, ...] | None:
    meta = node.meta.get("tensor_meta") if isinstance(node, Node) else None
    return tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else None


def _arg(node: Node, index: int, name: str, default: Any = None) -> Any:
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def call_args(node: Node, names: tuple[str, ...], defaults: tuple[Any, ...]) -> list[Any] | None:
    """A call's arguments in signature order (positional or by keyword, else the default), or
    None when it passes more than the signature has or a keyword it does not name."""
    if len(node.args) > len(names) or any(key not in names for key in node.kwargs):
        return None
    return [
        _arg(node, i, name, default) for i, (name, default) in enumerate(zip(names, defaults, strict=True))
    ]


def _is_call(node: Any, targets: tuple[Any, ...], methods: tuple[str, ...] = ()) -> bool:
    if not isinstance(node, Node):
        return False
    if node.op == "call_function" and node.target in targets:
        return True
    return node.op == "call_method" and node.target in methods


def _linear_parts(gm: torch.fx.GraphModule, node: Node) -> tuple[Node, Node, Node | None] | None:
    """(x, weight (out, in) node, bias node) when ``node`` is a Linear / F.linear / x @ W.T."""
    graph = gm.graph
    if node.op == "call_module" and isinstance(gm.get_submodule(str(node.target)), torch.nn.Linear):
        mod = gm.get_submodule(str(node.target))
        with graph.inserting_before(node):
            weight = graph.get_attr(f"{node.target}.weight")
            bias = graph.get_attr(f"{node.target}.bias") if mod.bias is not None else None
        return node.args[0], weight, bias  # type: ignore[return-value]
    if _is_call(node, (torch.nn.functional.linear, torch.ops.aten.linear.default)):
        return _arg(node, 0, "input"), _arg(node, 1, "weight"), _arg(node, 2, "bias")
    if _is_call(node, MATMULS, ("matmul", "mm")) and len(node.args) == 2:
        rhs: Any = node.args[1]
        transposed = isinstance(rhs, Node) and (
            (rhs.op == "call_function" and rhs.target is getattr and rhs.args[1] == "T")
            or _is_call(rhs, (torch.t,), ("t",))
        )
        if transposed and _shape(rhs) is not None and len(_shape(rhs) or ()) == 2:
            return node.args[0], rhs.args[0], None  # type: ignore[return-value]
    return None


def sole_user(node: Node) -> Node | None:
    """The one node that reads ``node``, when it reads it as its first argument, else None."""
    users = list(node.users)
    if len(users) != 1 or not users[0].args or users[0].args[0] is not node:
        return None
    return users[0]


def activation(gm: torch.fx.GraphModule, node: Node) -> str | None:
    """The epilogue name of ``node`` when it is ReLU, GELU (erf or tanh) or SiLU of one tensor,
    as a function, a method or a module (``nn.ReLU``, ``nn.GELU``, ``nn.SiLU``); ATen's forms too. In-place ReLU
    counts (torchvision's ResNet uses it): the callers fuse an activation only when it is its
    input's sole user, so nothing else reads the tensor it would have written into."""
    aten = torch.ops.aten
    functional = torch.nn.functional
    if node.op == "call_module":
        module = gm.get_submodule(str(node.target))
        if type(module) is torch.nn.ReLU:
            return "relu"
        if type(module) is torch.nn.GELU:
            return "gelu_tanh" if module.approximate == "tanh" else "gelu"
        if type(module) is torch.nn.SiLU:
            return "silu"
        return None
    relus = (torch.relu, torch.relu_, functional.relu, aten.relu.default, aten.relu_.default)
    if _is_call(node, relus, ("relu", "relu_")):
        return "relu" if len(node.args) == 1 and set(node.kwargs) <= {"inplace"} else None
    if _is_call(node, (functional.gelu, aten.gelu.default), ("gelu",)) and len(node.args) == 1:
        approximate = node.kwargs.get("approximate", "none")
        extra = set(node.kwargs) - {"approximate"}
        return None if extra else {"none": "gelu", "tanh": "gelu_tanh"}.get(str(approximate))
    silus = (functional.silu, aten.silu.default, aten.silu_.default)
    if _is_call(node, silus) and len(node.args) == 1 and set(node.kwargs) <= {"inplace"}:
        return "silu"
    return None


def activate(out: torch.Tensor, act: str | None) -> torch.Tensor:
    """``out`` through the epilogue ``activation`` names (None: as it is): what a kernel call
    with that epilogue computes, for shape propagation on meta tensors."""
    if act == "relu":
        return torch.relu(out)
    if act in ("gelu", "gelu_tanh"):
        return torch.nn.functional.gelu(out, approximate="tanh" if act == "gelu_tanh" else "none")
    if act == "silu":
        return torch.nn.functional.silu(out)
    return out


def sum_of_linear(gm: torch.fx.GraphModule) -> int:
    fired = 0
    for node in list(gm.graph.nodes):
        if not _is_call(node, (torch.sum,), ("sum",)) or len(node.users) == 0:
            continue
        shape = _shape(node.args[0])
        dim = _arg(node, 1, "dim")
        dim = dim[0] if isinstance(dim, list | tuple) and len(dim) == 1 else dim
        if shape is None or not isinstance(dim, int) or dim % len(shape) != len(shape) - 1:
            continue
        chain: list[Node] = []
        value = node.args[0]
        while _is_call(value, SCALE_OPS) and isinstance(value.args[1], int | float) and len(value.users) == 1:
            chain.append(value)
            value = value.args[0]
        parts = _linear_parts(gm, value) if isinstance(value, Node) and len(value.users) == 1 else None
        if parts is None:
            continue
        x, weight, bias = parts
        g = gm.graph
        # Summed in float64 and rounded once at the end: summing the weight's rows first
        # cancels, and in float32 the GEMV's error was 3x the GEMM's (KernelBench L2 18 failed
        # the strict 1e-4 check); the float64 reads are a GEMV's, not a GEMM's.
        wide: dict[str, torch.fx.node.Argument] = {"dim": 0, "keepdim": True, "dtype": torch.float64}
        with g.inserting_before(node):
            w_sum = g.call_function(torch.sum, (weight,), wide)
            b_sum = g.call_function(torch.sum, (bias,), wide) if bias else None
            x64 = g.call_method("double", (x,))
            out = g.call_function(torch.nn.functional.linear, (x64, w_sum, b_sum))
            out = g.call_method("type_as", (out, x))
            for op in reversed(chain):
                out = g.call_function(op.target, (out, op.args[1]))  # type: ignore[arg-type]
            if not _arg(node, 2, "keepdim", False):
                out = g.call_method("squeeze", (out, -1))
        node.replace_all_uses_with(out)
        fired += 1
    return fired


def diag_matmul(gm: torch.fx.GraphModule) -> int:
    fired = 0
    for node in list(gm.graph.nodes):
        if not _is_call(node, MATMULS, ("matmul", "mm")) or len(node.args) != 2:
            continue
        lhs, rhs = node.args
        g = gm.graph
        for side, diag, other in ((0, lhs, rhs), (1, rhs, lhs)):
            if (
                _is_call(diag, (torch.diag,), ("diag",))
                and len(diag.args) == 1
                and _shape(diag.args[0]) is not None
            ):  # type: ignore[union-attr]
                if len(_shape(diag.args[0]) or ()) != 1:  # type: ignore[union-attr]
                    continue
                with g.inserting_before(node):
                    vec = diag.args[0]  # type: ignore[union-attr]
                    if side == 0:
                        vec = g.call_method("unsqueeze", (vec, -1))
                    out = g.call_function(operator.mul, (vec, other) if side == 0 else (other, vec))
                node.replace_all_uses_with(out)
                fired += 1
                break
    return fired


def reassociate(gm: torch.fx.GraphModule) -> int:
    fired = 0
    for node in list(gm.graph.nodes):
        if not _is_call(node, MATMULS, ("matmul", "mm")) or len(node.args) != 2:
            continue
        inner, c = node.args
        if not _is_call(inner, MATMULS, ("matmul", "mm")) or len(inner.users) != 1 or len(inner.args) != 2:  # type: ignore[union-attr]
            continue
        a, b = inner.args  # type: ignore[union-attr]
        shapes = [_shape(a), _shape(b), _shape(c)]
        if any(s is None or len(s) != 2 for s in shapes):
            continue
        (m, k), (_, n), (_, p) = shapes  # type: ignore[misc]
        if k * n * p + m * k * p >= 0.5 * (m * k * n + m * n * p):
            continue
        g = gm.graph
        with g.inserting_before(node):
            bc = g.call_function(torch.matmul, (b, c))
            out = g.call_function(torch.matmul, (a, bc))
        node.replace_all_uses_with(out)
        fired += 1
    return fired


def identities(gm: torch.fx.GraphModule) -> int:
    fired = 0
    for node in list(gm.graph.nodes):
        neutral = {operator.mul: 1, operator.truediv: 1, operator.add: 0, operator.sub: 0}
        if node.op == "call_function" and node.target in neutral and len(node.args) == 2:
            x, c = node.args
            if isinstance(x, Node) and type(c) in (int, float) and c == neutral[node.target]:
                if _shape(x) == _shape(node) and x.meta.get("tensor_meta") is not None:
                    if x.meta["tensor_meta"].dtype.is_floating_point:
                        node.replace_all_uses_with(x)
                        fired += 1
        if _is_call(node, (torch.transpose,), ("transpose",)) and len(node.args) == 3:
            inner = node.args[0]
            if _is_call(inner, (torch.transpose,), ("transpose",)) and len(inner.args) == 3:  # type: ignore[union-attr]
                if {*node.args[1:]} == {*inner.args[1:]}:  # type: ignore[union-attr]
                    node.replace_all_uses_with(inner.args[0])  # type: ignore[union-attr,arg-type]
                    fired += 1
    return fired


PASSES: dict[str, Callable[[torch.fx.GraphModule], int]] = {
    "sum-of-linear": sum_of_linear,
    "diag-matmul": diag_matmul,
    "reassociate": reassociate,
    "identities": identities,
    "gathered-tables": fx_gathers.gathered_tables,
    "gathered-linears": fx_gathers.gathered_linears,
    "attention-sdpa": fx_attention.sdpa_attention,
}


def rewrite(
    model: torch.nn.Module,
    inputs: list[Any],
    passes: dict[str, Callable[[torch.fx.GraphModule], int]] | None = None,
    helpers: dict[str, Callable[..., Any]] | None = None,
    buffers: Callable[[], dict[str, torch.Tensor]] | None = None,
    factories: bool = False,
) -> tuple[Body, list[str]] | None:
    """The rewritten forward as a Body and the passes that fired, or None when none did
    (``Unwritable`` when it cannot be written as code).
    ``helpers`` name the functions a pass calls that the candidate's prelude defines;
    ``buffers`` gives the values of the model's buffers (called only if a pass needs one).
    A tensor the tracer made from numbers and no literal can hold (RAFT's coordinate grid,
    Autoformer's index table) has the forward traced again with its factory calls recorded
    (``factories``), so the code makes it as the forward does; only such forwards are."""
    gm = trace(model, meta_inputs=inputs, factories=factories)
    gm.meta["buffers"] = buffers  # buffer values, on demand (the model itself is on meta)
    _Shapes(gm).run(*inputs)
    fired = []
    for name, fn in (PASSES if passes is None else passes).items():
        if fn(gm) > 0:
            fired.append(name)
            fx_inplace.eliminate_dead_code(gm.graph)  # what a pass replaced is not seen by the next
            _Shapes(gm).run(*inputs)  # the nodes a pass added get shapes for the next one
    if not fired:
        return None
    fx_inplace.eliminate_dead_code(gm.graph)
    fx_constants.inline(gm, model)
    gm.graph.lint()
    try:
        prelude, src = emit(gm, {**(helpers or {}), "_kforge_table": fx_constants.table})
    except SourceError as err:
        raise Unwritable(str(err)) from None
    if "_kforge_table(" in src:
        prelude = fx_constants.TABLE_HELPER.strip("\n") + ("\n\n\n" + prelude if prelude else "")
    for node in gm.graph.nodes:
        if node.op == "get_attr" and not fx_constants.has_attr(model, str(node.target)):
            if not factories:  # a constant made during tracing: traced again, its factories as calls
                try:
                    return rewrite(model, inputs, passes, helpers, buffers, factories=True)
                except Exception:  # noqa: BLE001 -- that trace failing leaves the first answer
                    pass
            value = getattr(gm, str(node.target), None)
            made = (
                f"{value.dtype}, {value.numel()} values"
                if isinstance(value, torch.Tensor)
                else type(value).__name__
            )
            raise Unwritable(
                f"the forward makes a tensor from numbers ({made}) that kforge cannot write into the code"
            )
    method = src.strip("\n").replace("def forward(self", "def _kforge_body(self", 1)
    return Body(method=method + "\n", prelude=prelude), fired


def spec(fired: list[str], runner: str = "eager") -> Spec:
    return Spec(
        family="fx-rewrite" if runner == "eager" else "fx-rewrite-compile",
        runner=runner,
        body="fx",
        tag=f"fx-rewrite[{','.join(fired)}]",
        note=f"algebraic rewrite ({', '.join(fired)}) removes work before any kernel runs",
    )
