"""Decomposed relative positions in hand-written attention (SAM's, ViTDet's and MViTv2's
``add_decomposed_rel_pos``): the scores viewed as (B, qh, qw, kh, kw) with ``rel_h[..., None]``
and ``rel_w[..., None, :]`` added and viewed back, rel[i, j] = rel_h[i, j // kw] + rel_w[i, j % kw].
The attention pass (:mod:`.fx_attention`) finds the form under the softmax with
:func:`decomposed_bias`; :func:`relative_mask` builds the (L, S) mask PyTorch's SDPA would need
from the two tables, which it carries under ``DECOMPOSED`` for the 3xTF32 flash kernel, which
reads them instead (the mask is then dead code and never built).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from .fx_masks import call as _call
from .fx_masks import shape as _shape
from .fx_operands import dtype_of, only_user

Node = torch.fx.Node
DECOMPOSED = "kforge_decomposed"  # node meta: (rel_h, rel_w), (..., L, KH) and (..., L, KW), of an attn_mask
VIEWS = ("view", "reshape")


def _sum(node: Any, user: Node) -> tuple[Node, Node] | None:
    """(a, b) of ``a + b`` (both graph values, no alpha) that ``user`` reads alone."""
    if not _call(node, (operator.add, torch.add), ("add",)) or len(node.args) != 2 or node.kwargs:
        return None
    a, b = node.args
    return (a, b) if isinstance(a, Node) and isinstance(b, Node) and only_user(node, user) else None


def decomposed_bias(node: Node) -> tuple[Node, Node, Node] | None:
    """(the first add, RH, RW) when ``node`` is ``(scores.view(*b, qh, qw, kh, kw) + RH +
    RW).view(*b, qh * qw, kh * kw)`` with RH (*b, qh, qw, kh, 1) and RW (*b, qh, qw, 1, kw) in
    either order (a batch dim of 1 broadcasts), all of the scores' dtype: the scores plus
    decomposed relative positions, rel[i, j] = RH[i, j // kw] + RW[i, j % kw]."""
    if not _call(node, (torch.reshape,), VIEWS) or not isinstance(node.args[0], Node):
        return None
    outer = _sum(node.args[0], node)
    inner = _sum(outer[0], node.args[0]) if outer is not None else None
    if outer is None or inner is None:
        return None
    grid = inner[0]
    if (
        not _call(grid, (torch.reshape,), VIEWS)
        or not only_user(grid, outer[0])
        or not isinstance(grid.args[0], Node)
    ):
        return None
    flat, five = _shape(grid.args[0]), _shape(grid)
    if flat is None or five is None or _shape(node) != flat or len(five) != len(flat) + 2:
        return None
    batch, (qh, qw, kh, kw) = five[:-4], five[-4:]
    if batch != flat[:-2] or qh * qw != flat[-2] or kh * kw != flat[-1]:
        return None
    terms: dict[str, Node] = {}
    for term in (inner[1], outer[1]):
        shape = _shape(term)
        if shape is None or len(shape) != len(five) or dtype_of(term) != dtype_of(grid):
            return None
        if any(size not in (1, full) for size, full in zip(shape[:-4], batch, strict=True)):
            return None
        sides: dict[tuple[int, ...], str] = {(qh, qw, kh, 1): "h", (qh, qw, 1, kw): "w"}
        side = sides.get(shape[-4:])
        if side is None or side in terms:
            return None
        terms[side] = term
    return outer[0], terms["h"], terms["w"]


def relative_mask(graph: torch.fx.Graph, rel: tuple[Node, Node], length: int) -> Node:
    """The (*b, L, S) mask of decomposed relative positions (what PyTorch's SDPA would need),
    built from the two tables as (*b, L, KH) and (*b, L, KW), which it carries under DECOMPOSED
    for a kernel that reads them instead (the mask is then dead code, never built)."""
    tables = []
    for term, keep in zip(rel, (-2, -1), strict=True):
        shape = _shape(term)
        tables.append(graph.call_method("reshape", (term, *shape[:-4], length, shape[keep])))  # type: ignore[index]
    grid = graph.call_function(
        operator.add,
        (graph.call_method("unsqueeze", (tables[0], -1)), graph.call_method("unsqueeze", (tables[1], -2))),
    )
    mask = graph.call_method("flatten", (grid, -2))
    mask.meta[DECOMPOSED] = tuple(tables)
    return mask
