"""The operands of hand-written attention, read off the FX graph for :mod:`.fx_attention`:
q, k and v with the same batch dimensions, keys written transposed (``k.transpose(-2, -1)``,
a permute of the last two dims) or held channels-first, key and value heads repeated for
grouped-query attention, and views that only regroup the batch dimensions."""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any

import torch
import torch.fx

from .fx_masks import arg as _arg
from .fx_masks import call as _call
from .fx_masks import shape as _shape

Node = torch.fx.Node
VIEWS = ("view", "reshape")


def only_user(node: Node, user: Node) -> bool:
    """Whether ``user`` is the one user of ``node`` that reads its values (``x.dtype``, as
    ``torch.finfo(x.dtype)`` reads it, and ``y.type_as(x)``, as T5 casts its probabilities
    back, read only its dtype; ``m.expand_as(x)``, as DistilBERT shapes its padding mask, only
    its shape)."""
    return [u for u in node.users if not _reads_only_metadata(u, node)] == [user]


def _reads_only_metadata(user: Node, node: Node) -> bool:
    if reads_attribute(user):
        return True
    return _call(user, (), ("type_as", "expand_as")) and user.args[1:] == (node,) and user.args[0] is not node


def unexpanded(mask: Any, scores: Any) -> Any:
    """m for a mask ``m.expand_as(x)`` or ``m.expand(...)`` to the scores' shape (DistilBERT's
    ``(mask == 0).view(b, 1, 1, s).expand_as(scores)``): masked_fill broadcasts m the same way,
    and SDPA takes it broadcast, never made (B, H, L, S)."""
    if not _call(mask, (), ("expand_as", "expand")) or not isinstance(mask.args[0], Node):
        return mask
    shape = _shape(mask)
    return mask.args[0] if shape is not None and shape == _shape(scores) else mask


def reads_attribute(user: Node) -> bool:
    """``x.dtype`` or ``x.device``: what q's are too (T5 builds its bias on ``scores.device``)."""
    return _call(user, (getattr,)) and len(user.args) == 2 and user.args[1] in ("dtype", "device")


def regroups_batch(node: Any) -> Node | None:
    """x when ``node`` is ``x.view(...)`` / ``reshape`` that keeps the last two dims and only
    regroups the ones before (BLOOM's (batch * heads, L, S) <-> (batch, heads, L, S))."""
    if not _call(node, (torch.reshape,), VIEWS) or not isinstance(node.args[0], Node):
        return None
    before, after = _shape(node.args[0]), _shape(node)
    if before is None or after is None or len(before) < 3 or len(after) < 3 or before[-2:] != after[-2:]:
        return None
    return node.args[0] if math.prod(before) == math.prod(after) else None


def transposed_last_two(node: Any) -> Node | None:
    """``k`` when ``node`` is ``k.transpose(-2, -1)`` (either order, or as torch.transpose), or
    a permute that swaps the last two dims alone (``k.permute(0, 2, 1)``)."""
    if _call(node, (torch.permute,), ("permute",)):
        k, dims = node.args[0], node.args[1:]
        dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], list | tuple) else dims
        shape = _shape(k)
        if shape is None or len(shape) < 2 or not all(isinstance(d, int) for d in dims):
            return None
        n = len(shape)
        swap = (*range(n - 2), n - 1, n - 2)
        return k if tuple(d % n for d in dims) == swap else None  # type: ignore[return-value]
    if not _call(node, (torch.transpose,), ("transpose",)):
        return None
    k, a, b = node.args[0], _arg(node, 1, "dim0"), _arg(node, 2, "dim1")
    shape = _shape(k)
    if shape is None or len(shape) < 2 or not isinstance(a, int) or not isinstance(b, int):
        return None
    n = len(shape)
    return k if {a % n, b % n} == {n - 2, n - 1} else None  # type: ignore[return-value]


@dataclasses.dataclass(frozen=True)
class Swapped:
    """``x.transpose(-2, -1)`` of a node, made only when the rewrite is emitted: keys and
    values the channels-first form holds as (..., E, S)."""

    node: Node


def dims(x: Any) -> tuple[int, ...] | None:
    if isinstance(x, Swapped):
        shape = _shape(x.node)
        return None if shape is None or len(shape) < 2 else (*shape[:-2], shape[-1], shape[-2])
    return _shape(x)


def emitted(graph: torch.fx.Graph, x: Any) -> Any:
    return graph.call_method("transpose", (x.node, -2, -1)) if isinstance(x, Swapped) else x


def repeated_heads(node: Any) -> tuple[Node, int] | None:
    """(x, groups) when ``node`` repeats each head of a (B, H, S, D) ``x`` ``groups`` times in a
    row along dim 1, as grouped-query attention's key and value heads are repeated:
    transformers' ``repeat_kv`` (``x[:, :, None].expand(B, H, g, S, D).reshape(B, H * g, S, D)``)
    or ``x.repeat_interleave(g, dim=1)``. Query head i then reads key head i // g, which is what
    SDPA's ``enable_gqa`` computes."""
    shape = _shape(node)
    if shape is None or len(shape) != 4:
        return None
    if _call(node, (torch.repeat_interleave,), ("repeat_interleave",)):
        source, groups, dim = node.args[0], _arg(node, 1, "repeats"), _arg(node, 2, "dim")
        ss = _shape(source)
        if isinstance(groups, int) and groups > 0 and dim in (1, -3) and ss is not None and len(ss) == 4:
            return (source, groups) if ss[1] * groups == shape[1] else None  # type: ignore[return-value]
        return None
    if not _call(node, (torch.reshape,), ("reshape", "view")) or not only_user(node.args[0], node):
        return None
    expanded = node.args[0]
    if not _call(expanded, (), ("expand",)) or not only_user(expanded.args[0], expanded):
        return None
    unsqueezed, es = expanded.args[0], _shape(expanded)  # (B, H, g, S, D)
    if es is None or len(es) != 5 or (es[0], es[1] * es[2], *es[3:]) != shape:
        return None
    x: Any = None
    if _call(unsqueezed, (operator.getitem,)) and isinstance(unsqueezed.args[1], tuple):
        index, whole = unsqueezed.args[1], slice(None, None, None)  # x[:, :, None] or x[:, :, None, :, :]
        if len(index) in (3, 5) and index[2] is None and all(i == whole for i in index[:2] + index[3:]):
            x = unsqueezed.args[0]
    elif _call(unsqueezed, (torch.unsqueeze,), ("unsqueeze",)) and _arg(unsqueezed, 1, "dim") == 2:
        x = unsqueezed.args[0]
    xs = _shape(x)
    if xs is None or xs != (es[0], es[1], es[3], es[4]):
        return None
    return x, es[2]


def grouped(found: dict[str, Any]) -> dict[str, Any]:
    """``found`` with k and v unrepeated and ``gqa`` set, when both repeat their heads the same
    number of times (else as it was)."""
    k, v = repeated_heads(found["k"]), repeated_heads(found["v"])
    if k is None or v is None or k[1] != v[1] or k[1] < 2:
        return found
    return {**found, "k": k[0], "v": v[0], "gqa": True}


def dtype_of(node: Any) -> Any:
    meta = node.meta.get("tensor_meta") if isinstance(node, Node) else None
    return getattr(meta, "dtype", None)


def heads_broadcast(found: dict[str, Any]) -> bool:
    """q (B, H, L, E) against k (B, 1, S, E) and v (B, 1, S, Ev): multi-query attention written
    with the matmul broadcasting one key head over the query heads (Falcon's), which SDPA takes
    as one group (``enable_gqa`` with one key head)."""
    q, k, v = (dims(found[name]) for name in ("q", "k", "v"))
    if q is None or k is None or v is None or not len(q) == len(k) == len(v) == 4:
        return False
    return q[0] == k[0] == v[0] and k[1] == v[1] == 1 < q[1] and q[-1] == k[-1] and k[-2] == v[-2]


def same_batch(found: dict[str, Any]) -> bool:
    """q (..., L, E), k (..., S, E), v (..., S, Ev) with the same batch dimensions (no broadcasting)."""
    q, k, v = (dims(found[name]) for name in ("q", "k", "v"))
    if q is None or k is None or v is None or not len(q) == len(k) == len(v) >= 3:
        return False
    return q[:-2] == k[:-2] == v[:-2] and q[-1] == k[-1] and k[-2] == v[-2]


def batch_viewed(graph: torch.fx.Graph, qkv: list[Any], shapes: tuple[Any, ...], view: Any) -> list[Any]:
    """q, k and v viewed to the batch dims ``view`` (BART's (B, H), where its mask is added over
    q's flat (B * H)), or as they are with no view."""
    if view is None:
        return qkv
    return [graph.call_method("reshape", (t, *view, *d[-2:])) for t, d in zip(qkv, shapes, strict=True)]


def sdpa_scale(graph: torch.fx.Graph, found: Any) -> Any:
    """SDPA's scale for the pattern's: 1.0 when it has none, a number stays a number."""
    if not isinstance(found, tuple):
        return 1.0
    how, value = found
    if how == "mul":
        return value
    if isinstance(value, int | float):
        return 1.0 / value
    return graph.call_function(operator.truediv, (1.0, value))


def same_dtype_cast(node: Node) -> bool:
    """``x.to(dtype)``, ``x.type(dtype)`` (a dtype, or another tensor's ``.dtype``),
    ``x.type_as(y)`` or ``x.float()`` that leaves x's dtype as it is: no cast."""
    if _call(node, (), ("float",)) and len(node.args) == 1 and not node.kwargs:
        named = True
    elif _call(node, (), ("type_as",)) and len(node.args) == 2 and not node.kwargs:
        named = isinstance(node.args[1], Node)
    elif not _call(node, (), ("to", "type")) or len(node.args) != 2 or node.kwargs:
        return False
    else:
        target = node.args[1]
        named = isinstance(target, torch.dtype) or (
            _call(target, (getattr,)) and len(target.args) == 2 and target.args[1] == "dtype"  # type: ignore[union-attr]
        )
    before, after = (n.meta.get("tensor_meta") for n in (node.args[0], node) if isinstance(n, Node))  # type: ignore[misc]
    return named and getattr(before, "dtype", 0) == getattr(after, "dtype", 1)


def casts(softmax: Node) -> bool:
    """Whether the softmax casts (SDPA's output keeps the input's dtype): a dtype named that is
    not the scores' own (transformers' ``softmax(scores, dtype=torch.float32)`` on fp32 scores
    does not cast)."""
    values = [*softmax.args[2:], softmax.kwargs.get("dtype")]
    meta = softmax.args[0].meta.get("tensor_meta") if isinstance(softmax.args[0], Node) else None
    own = getattr(meta, "dtype", None)
    return any(isinstance(v, torch.dtype) and v != own for v in values)
