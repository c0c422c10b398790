"""LayerNorm and RMSNorm, with the residual add before them, on kforge's one-pass Triton
template (:mod:`kforge.tools.norms`): part of family ``triton-template`` (:mod:`.templates`).

An FX pass finds, over the last dimension of an fp32 tensor of width up to 16384:

- LayerNorm as a module, ``F.layer_norm`` or ATen's ``layer_norm``;
- RMSNorm as a module (``nn.RMSNorm``), ``F.rms_norm``, or written out as models write it:
  ``x * rsqrt(mean(x ** 2, -1, keepdim=True) + eps)``, then optionally ``* weight`` (casts to
  fp32 of an fp32 tensor are looked through, as transformers' LlamaRMSNorm has them);

and calls ``_kforge_norm`` in its place. When the normalised tensor is ``a + b`` of two
tensors of its shape, the add moves into the kernel; if the sum is also read elsewhere
(the residual stream), ``_kforge_add_norm`` returns it beside the norm, written once.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from . import fx_rewrite
from .tf32x3 import _meta

Node = torch.fx.Node
MAX_WIDTH = 16384  # kforge.tools.norms.MAX_WIDTH (not imported here: it imports Triton)
aten = torch.ops.aten
F = torch.nn.functional

HELPERS = """
from kforge.tools.norms import add_norm as _kforge_add_norm
from kforge.tools.norms import norm as _kforge_norm
"""


def _reference(x: torch.Tensor, residual: Any, weight: Any, bias: Any, eps: float, rms: bool) -> torch.Tensor:
    h = x if residual is None else x + residual
    if rms:
        y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        y = y if weight is None else y * weight
        return y if bias is None else y + bias
    return F.layer_norm(h, (h.shape[-1],), weight, bias, eps)


def _kforge_norm(
    x: torch.Tensor, residual: Any, weight: Any, bias: Any, eps: float, rms: bool
) -> torch.Tensor:
    """What the emitted call computes (shape propagation runs it on meta tensors)."""
    return _reference(x, residual, weight, bias, eps, rms)


def _kforge_add_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: Any, bias: Any, eps: float, rms: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    return _reference(x, residual, weight, bias, eps, rms), x + residual


def _fp32(node: Any) -> bool:
    meta = _meta(node)
    return meta is not None and meta.dtype == torch.float32


def _through_casts(node: Any) -> Any:
    """The tensor a chain of no-op casts (fp32 to fp32: ``.to``, ``.float()``, ``.type_as``) reads."""
    while (
        isinstance(node, Node)
        and fx_rewrite._is_call(node, (aten._to_copy.default, aten.to.dtype), ("to", "float", "type_as"))
        and node.args
        and _fp32(node)
        and _fp32(node.args[0])
    ):
        node = node.args[0]
    return node


def _const(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


_is = fx_rewrite._is_call


def _operands(node: Node) -> tuple[Any, Any] | None:
    return (node.args[0], node.args[1]) if len(node.args) == 2 and not node.kwargs else None


MULS = (operator.mul, torch.mul, aten.mul.Tensor)
ADDS = (operator.add, torch.add, aten.add.Tensor)


def _written_rms(node: Node) -> tuple[Node, Any, float] | None:
    """(the output node, x, eps) when ``node`` is the rsqrt of mean(x^2, -1, keepdim) + eps and
    its one reader multiplies it by x."""
    if not _is(node, (torch.rsqrt, aten.rsqrt.default), ("rsqrt",)) or len(node.args) != 1:
        return None
    add: Any = node.args[0]
    parts = _operands(add) if _is(add, ADDS, ("add",)) else None
    if parts is None:
        return None
    mean: Any
    mean, eps = (parts[0], _const(parts[1])) if _const(parts[1]) is not None else (parts[1], _const(parts[0]))
    if eps is None or not _is(mean, (torch.mean, aten.mean.dim), ("mean",)):
        return None
    dim = fx_rewrite._arg(mean, 1, "dim")
    keep = fx_rewrite._arg(mean, 2, "keepdim", False)
    if dim not in (-1, [-1], (-1,)) or keep is not True or len(mean.args) + len(mean.kwargs) > 3:
        return None
    square: Any = mean.args[0]
    if (
        _is(square, (torch.pow, operator.pow, aten.pow.Tensor_Scalar), ("pow",))
        and _const(square.args[1]) == 2
    ):
        x = _through_casts(square.args[0])
    elif _is(square, MULS, ("mul",)) and _operands(square) and square.args[0] is square.args[1]:
        x = _through_casts(square.args[0])
    else:
        return None
    users = list(node.users)
    if len(users) != 1 or not _is(users[0], MULS, ("mul",)) or _operands(users[0]) is None:
        return None
    other = [a for a in users[0].args if a is not node]
    if len(other) != 1 or _through_casts(other[0]) is not x:
        return None
    if any(len(n.users) != 1 for n in (add, mean, square)):
        return None
    return users[0], x, eps


def _weight_after(out: Node, width: int) -> tuple[Node, Any]:
    """``(w * out, w)`` when out's one reader (through casts) multiplies it by a (width,) tensor."""
    node = out
    while len(node.users) == 1:
        user = next(iter(node.users))
        if _through_casts(user) is node and user is not node:
            node = user
            continue
        parts = _operands(user) if _is(user, MULS, ("mul",)) else None
        if parts is None:
            break
        weight = parts[1] if parts[0] is node else parts[0]
        meta = _meta(weight)
        if meta is not None and tuple(meta.shape) == (width,) and meta.dtype == torch.float32:
            return user, weight
        break
    return out, None


def _norm_call(gm: torch.fx.GraphModule, node: Node) -> tuple[Node, Any, Any, Any, float, bool] | None:
    """(node to replace, x, weight, bias, eps, rms) for a norm over the last dimension."""
    graph = gm.graph
    if node.op == "call_module":
        mod = gm.get_submodule(str(node.target))
        if isinstance(mod, torch.nn.LayerNorm | torch.nn.RMSNorm) and len(mod.normalized_shape) == 1:
            rms = isinstance(mod, torch.nn.RMSNorm)
            eps: float | None = mod.eps if mod.eps is not None else torch.finfo(torch.float32).eps
            with graph.inserting_before(node):
                weight = graph.get_attr(f"{node.target}.weight") if mod.weight is not None else None
                has_bias = not rms and getattr(mod, "bias", None) is not None
                bias = graph.get_attr(f"{node.target}.bias") if has_bias else None
            return node, node.args[0], weight, bias, float(eps or 0.0), rms
        return None
    if _is(node, (F.layer_norm, torch.layer_norm, aten.layer_norm.default)):
        shape = fx_rewrite._arg(node, 1, "normalized_shape")
        eps = _const(fx_rewrite._arg(node, 4, "eps", 1e-5))
        if isinstance(shape, list | tuple) and len(shape) == 1 and eps is not None:
            return (
                node,
                node.args[0],
                fx_rewrite._arg(node, 2, "weight"),
                fx_rewrite._arg(node, 3, "bias"),
                eps,
                False,
            )
        return None
    if _is(node, (F.rms_norm, aten.rms_norm.default)):
        shape = fx_rewrite._arg(node, 1, "normalized_shape")
        eps_arg = fx_rewrite._arg(node, 3, "eps")
        eps = torch.finfo(torch.float32).eps if eps_arg is None else _const(eps_arg)
        if isinstance(shape, list | tuple) and len(shape) == 1 and eps is not None:
            return node, node.args[0], fx_rewrite._arg(node, 2, "weight"), None, eps, True
        return None
    written = _written_rms(node)
    if written is None:
        return None
    out, x, eps = written
    meta = _meta(x)
    if meta is None:
        return None
    last, weight = _weight_after(out, meta.shape[-1])
    return last, x, weight, None, eps, True


def _ancestors(node: Node) -> set[Node]:
    """The nodes ``node`` is computed from, and itself."""
    seen: set[Node] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack += n.all_input_nodes
    return seen


def replace_norms(gm: torch.fx.GraphModule) -> int:
    fired = 0
    graph = gm.graph
    for node in list(graph.nodes):
        if not node.users:
            continue
        call = _norm_call(gm, node)
        if call is None:
            continue
        last, x, weight, bias, eps, rms = call
        xm, out = _meta(x), _meta(last)
        if xm is None or out is None or xm.dtype != torch.float32 or out.shape != xm.shape:
            continue
        if xm.dim() == 0 or not 0 < xm.shape[-1] <= MAX_WIDTH:
            continue
        residual, outside = None, []
        if (
            _is(x, ADDS, ("add",))
            and _operands(x)
            and all(_fp32(a) and tuple(_meta(a).shape) == tuple(xm.shape) for a in x.args)  # type: ignore[union-attr]
        ):
            chain = _ancestors(last)  # what the norm itself computes from the sum
            outside = [u for u in x.users if u not in chain]  # the residual stream, read on
            order = {n: i for i, n in enumerate(graph.nodes)}
            if all(order[u] > order[last] for u in outside):  # h is defined at the norm: read after it
                x, residual = x.args  # the add before the norm moves into the kernel
            else:
                outside = []
        with graph.inserting_before(last):
            args = (x, residual, weight, bias, eps, rms)
            if outside:
                both = graph.create_node("call_function", _kforge_add_norm, args, name="add_norm")
                new = graph.call_function(operator.getitem, (both, 0))
                h = graph.call_function(operator.getitem, (both, 1))
            else:
                new = graph.create_node("call_function", _kforge_norm, args, name="norm")
        new.meta.update(last.meta)
        last.replace_all_uses_with(new)
        for user in outside:
            user.replace_input_with(call[1], h)
        fired += 1
    return fired
