"""The rotary-embedding pattern of the ``triton-template`` family (:mod:`.templates`):
transformers' ``x * cos + rotate_half(x) * sin`` with ``rotate_half(x) = cat((-x[..., h:],
x[..., :h]), -1)``, or GPT-J's ``rotate_every_two(x) = stack((-x[..., 1::2], x[..., ::2]),
-1).flatten(-2)``, in either order of each product and of the sum, and the partial rotary of
GPT-NeoX and GPT-J, ``cat((rotary(q[..., :r]), q[..., r:]), -1)``, each a call of kforge's
kernel (:mod:`kforge.tools.rotary`). Slices are read from the shapes shape propagation
recorded (``x.shape[-1] // 2`` traces as size arithmetic)."""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from . import fx_rewrite, norms

Node = torch.fx.Node


def _kforge_rotary(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False
) -> torch.Tensor:
    """What the emitted call computes: the rotary over x's first ``cos.shape[-1]`` columns."""
    rot, width = cos.shape[-1], x.shape[-1]
    part = x[..., :rot]
    if interleaved:
        turned = torch.stack((-part[..., 1::2], part[..., ::2]), dim=-1).flatten(-2)
    else:
        turned = torch.cat((-part[..., rot // 2 :], part[..., : rot // 2]), dim=-1)
    out = part * cos + turned * sin
    return out if rot == width else torch.cat((out, x[..., rot:]), dim=-1)


NEGS = (operator.neg, torch.neg)
CATS = (torch.cat, torch.concat, torch.concatenate)


def _last_slice(node: Any, source: Node, width: int) -> slice | None:
    """The slice when ``node`` is ``source[..., slice]`` on the last dimension (an Ellipsis or
    full slices before it) giving ``width`` columns, checked on the shapes; else None."""
    if not (isinstance(node, Node) and node.op == "call_function" and node.target is operator.getitem):
        return None
    if node.args[0] is not source or not isinstance(node.args[1], tuple) or not node.args[1]:
        return None
    *lead, last = node.args[1]
    if not all(x is Ellipsis or x == slice(None) for x in lead) or not isinstance(last, slice):
        return None
    out, src = fx_rewrite.meta(node), fx_rewrite.meta(source)
    if out is None or src is None or tuple(out.shape) != (*src.shape[:-1], width):
        return None
    return last if Ellipsis in lead or len(lead) == src.dim() - 1 else None


def _columns(node: Any, source: Node, first: bool, width: int) -> bool:
    """``node`` is ``source[..., :width]`` (``first``) or ``source[..., -width:]``."""
    last = _last_slice(node, source, width)
    return last is not None and last.step is None and (last.start if first else last.stop) is None


def _every_other(node: Any, source: Node, start: int, width: int) -> bool:
    """``node`` is ``source[..., start::2]`` (``width`` columns)."""
    last = _last_slice(node, source, width)
    return last is not None and last.step == 2 and (last.start or 0) == start and last.stop is None


def _negated(node: Any) -> tuple[Node, Node, int] | None:
    """(the slice, x, half x's last dim) when ``node`` is ``-x[...]`` and that dim is even."""
    if not fx_rewrite._is_call(node, NEGS, ("neg",)) or len(node.args) != 1:
        return None
    sliced = node.args[0]
    source = sliced.args[0] if isinstance(sliced, Node) and sliced.args else None
    sm = fx_rewrite.meta(source)
    if not isinstance(source, Node) or sm is None or sm.dim() == 0 or sm.shape[-1] % 2:
        return None
    return sliced, source, sm.shape[-1] // 2


def _cat_last(node: Any) -> list[Any] | None:
    """The tensors of a concatenation on the last dimension, else None."""
    if not fx_rewrite._is_call(node, CATS, ()):
        return None
    values = fx_rewrite.call_args(node, ("tensors", "dim"), (None, 0))
    out = fx_rewrite.meta(node)
    if values is None or out is None or not isinstance(values[0], list | tuple):
        return None
    return list(values[0]) if values[1] in (-1, out.dim() - 1) else None


def _rotate_half_of(node: Any) -> Node | None:
    """x when ``node`` is ``cat((-x[..., h:], x[..., :h]), -1)`` with 2h x's last dim."""
    parts = _cat_last(node)
    if parts is None or len(parts) != 2:
        return None
    neg, first = parts
    found = _negated(neg)
    if found is None:
        return None
    second, source, half = found
    ok = _columns(second, source, False, half) and _columns(first, source, True, half)
    return source if ok else None


STACKS = (torch.stack,)


def _rotate_every_two_of(node: Any) -> Node | None:
    """x when ``node`` is ``stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)`` (GPT-J's
    ``rotate_every_two``) with x's last dim even."""
    if not fx_rewrite._is_call(node, (torch.flatten,), ("flatten",)) or node.kwargs:
        return None
    stacked = node.args[0] if node.args else None
    sm = fx_rewrite.meta(stacked)
    if sm is None or sm.dim() < 2 or sm.shape[-1] != 2:
        return None
    if tuple(node.args[1:]) not in ((-2,), (sm.dim() - 2,), (-2, -1), (sm.dim() - 2, sm.dim() - 1)):
        return None
    if not isinstance(stacked, Node) or not fx_rewrite._is_call(stacked, STACKS, ()):
        return None
    values = fx_rewrite.call_args(stacked, ("tensors", "dim"), (None, 0))
    if values is None or not isinstance(values[0], list | tuple) or len(values[0]) != 2:
        return None
    if values[1] not in (-1, sm.dim() - 1):
        return None
    neg, first = values[0]
    found = _negated(neg)
    if found is None:
        return None
    second, source, half = found
    ok = _every_other(second, source, 1, half) and _every_other(first, source, 0, half)
    return source if ok else None  # (..., half, 2) flattened from -2: x's shape


def _product(node: Any) -> tuple[Any, Any] | None:
    if fx_rewrite._is_call(node, norms.MULS, ("mul",)) and len(node.args) == 2 and not node.kwargs:
        return node.args[0], node.args[1]
    return None


def rotary_call(gm: torch.fx.GraphModule, node: Node) -> tuple[Any, ...] | None:
    """(x, cos, sin) of ``x * cos + rotate_half(x) * sin`` (either order of each product and
    of the sum) on fp32 tensors whose result has x's shape, cos and sin of one shape with x's
    last dim, (x, cos, sin, True) of the same with ``rotate_every_two``; else None."""
    if not fx_rewrite._is_call(node, norms.ADDS, ("add",)) or len(node.args) != 2 or node.kwargs:
        return None
    for left, right in (node.args, node.args[::-1]):
        plain, turned = _product(left), _product(right)
        if plain is None or turned is None:
            continue
        for rotated, sin in (turned, turned[::-1]):
            for interleaved, turn in ((False, _rotate_half_of), (True, _rotate_every_two_of)):
                x = turn(rotated)
                if x is None or x not in plain:
                    continue
                cos = plain[1] if plain[0] is x else plain[0]
                if _rotary_operands(node, x, cos, sin):
                    return (x, cos, sin, True) if interleaved else (x, cos, sin)
    return None


def _rotary_operands(node: Node, x: Node, cos: Any, sin: Any) -> bool:
    metas = [fx_rewrite.meta(n) for n in (node, x, cos, sin)]
    if any(m is None or m.dtype != torch.float32 for m in metas):
        return False
    out, xm, cm, sm = metas
    assert out is not None and xm is not None and cm is not None and sm is not None
    return (
        tuple(out.shape) == tuple(xm.shape)
        and tuple(cm.shape) == tuple(sm.shape)
        and cm.dim() <= xm.dim() <= 4
        and cm.shape[-1] == xm.shape[-1]
    )


def partial_rotary_call(gm: torch.fx.GraphModule, node: Node) -> tuple[Any, ...] | None:
    """(q, cos, sin) of GPT-NeoX's ``cat((rotary(q[..., :r]), q[..., r:]), -1)`` once the
    rotary is a template call: one call over all of q's columns."""
    parts = _cat_last(node)
    if parts is None or len(parts) != 2:
        return None
    rotated, rest = parts
    if not (isinstance(rotated, Node) and rotated.op == "call_function" and rotated.target is _kforge_rotary):
        return None
    part, cos, sin, *interleaved = rotated.args
    source = part.args[0] if isinstance(part, Node) and part.args else None
    pm, sm, rm = fx_rewrite.meta(part), fx_rewrite.meta(source), fx_rewrite.meta(rest)
    if not isinstance(source, Node) or pm is None or sm is None or rm is None:
        return None
    if not (_columns(part, source, True, pm.shape[-1]) and _columns(rest, source, False, rm.shape[-1])):
        return None
    return (source, cos, sin, *interleaved) if pm.shape[-1] + rm.shape[-1] == sm.shape[-1] else None
