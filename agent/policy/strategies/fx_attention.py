"""Attention written out by hand, rewritten to ``scaled_dot_product_attention`` on the FX graph.

The pattern, as models write it::

    scores = q @ k.transpose(-2, -1)          # torch.matmul / @ / torch.bmm
    scores = scores / math.sqrt(d)            # or * scale; optional
    scores = scores.masked_fill(mask, -inf)   # or + additive_mask; optional
    probs = softmax(scores, dim=-1)           # torch / F / method / nn.Softmax
    probs = dropout(probs)                    # only with p = 0 (a no-op)
    out = probs @ v

becomes ``F.scaled_dot_product_attention(q, k, v, attn_mask=..., scale=...)``, which never
writes the (L, S) score and probability matrices to memory (flash or memory-efficient
kernels; in strict fp32 the memory-efficient one, which computes in fp32). It is the same
function: the scale is passed as the pattern computes it (1.0 when it has none), a
``masked_fill(m, -inf)`` becomes the boolean mask ``~m``, an additive mask is passed as it is.
Also transformers' eager form: key and value heads repeated for grouped-query attention
(``repeat_kv`` or ``repeat_interleave``) become the unrepeated tensors with ``enable_gqa``; a
causal mask added from a buffer (0 on and below the diagonal, -inf above) becomes
``is_causal``; ``softmax(..., dtype=torch.float32)`` on fp32 scores is no cast. BLOOM's form too: the
scores as ``baddbmm(bias, q, k^T, alpha=scale)`` over a flat (batch * heads) dimension,
viewed as (batch, heads) for the mask and back for the product (views that only regroup the
dimensions before the last two are dropped, the attention computed in q's), the causal mask
filled with ``torch.finfo(dtype).min``. A finite fill of at most -1e9 is taken only where the
mask is proved causal: every row then keeps its diagonal, and exp(fill - row max) is 0 as
exp(-inf) is unless a kept score is itself below about -1e9. A mask fill and an additive
bias together become one ``attn_mask`` (``where(mask, -inf, bias)``); when the fill is
causal, the node carries the bias under ``CAUSAL_KEY_BIAS`` so that a kernel taking a key
bias and the causal mask together (the 3xTF32 flash attention) need not read that (L, S)
mask. Anything else (intermediates used elsewhere, the probabilities returned, a finite fill
on a mask not proved causal, an additive mask before the scale, batch dimensions that
broadcast) is left alone.
"""

from __future__ import annotations

import math
import operator
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from ....tools.task import import_file

Node = torch.fx.Node
MATMULS = (torch.matmul, operator.matmul, torch.bmm)
SOFTMAXES = (torch.softmax, F.softmax, torch.nn.functional.softmax)
DROPOUTS = (F.dropout, torch.dropout)
BUFFER_READ_MAX_BYTES = 256 * 2**20  # a Model built on the CPU to read its buffers: at most this much state
FINITE_FILL_MAX = -1e9  # a finite fill this low is -inf's equal under a causal mask (module doc)
CAUSAL_KEY_BIAS = "kforge_causal_key_bias"  # node meta: the bias a causal attn_mask was built from
VIEWS = ("view", "reshape")


def _call(node: Any, functions: tuple[Any, ...], methods: tuple[str, ...] = ()) -> bool:
    if not isinstance(node, Node):
        return False
    return (node.op == "call_function" and node.target in functions) or (
        node.op == "call_method" and node.target in methods
    )


def _module(gm: torch.fx.GraphModule, node: Any, kind: type) -> Any:
    if isinstance(node, Node) and node.op == "call_module":
        mod = gm.get_submodule(str(node.target))
        return mod if isinstance(mod, kind) else None
    return None


def _shape(node: Any) -> tuple[int, ...] | None:
    meta = node.meta.get("tensor_meta") if isinstance(node, Node) else None
    return tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else None


def _arg(node: Node, index: int, name: str, default: Any = None) -> Any:
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def _last_dim(dim: Any, ndim: int) -> bool:
    return isinstance(dim, int) and dim in (-1, ndim - 1)


def _only_user(node: Node, user: Node) -> bool:
    """Whether ``user`` is the one user of ``node`` that reads its values (``x.dtype``, as
    ``torch.finfo(x.dtype)`` reads it, does not)."""
    return [u for u in node.users if not _reads_dtype(u)] == [user]


def _reads_dtype(node: Node) -> bool:
    return _call(node, (getattr,)) and len(node.args) == 2 and node.args[1] == "dtype"


def _regroups_batch(node: Any) -> Node | None:
    """x when ``node`` is ``x.view(...)`` / ``reshape`` that keeps the last two dims and only
    regroups the ones before (BLOOM's (batch * heads, L, S) <-> (batch, heads, L, S))."""
    if not _call(node, (torch.reshape,), VIEWS) or not isinstance(node.args[0], Node):
        return None
    before, after = _shape(node.args[0]), _shape(node)
    if before is None or after is None or len(before) < 3 or len(after) < 3 or before[-2:] != after[-2:]:
        return None
    return node.args[0] if math.prod(before) == math.prod(after) else None


def _batch_free(mask: Any) -> bool:
    """Whether a mask is the same for every batch entry (all dims before the last two are 1),
    so that it means the same over any grouping of the batch dimensions."""
    shape = _shape(mask)
    return shape is not None and all(d == 1 for d in shape[:-2])


def _very_negative(value: Any) -> bool:
    """A fill at most FINITE_FILL_MAX: a number, or ``torch.finfo(dtype).min`` as traced."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value <= FINITE_FILL_MAX
    return (
        _call(value, (getattr,))
        and len(value.args) == 2
        and value.args[1] == "min"
        and _call(value.args[0], (torch.finfo,))
    )


def _transposed_last_two(node: Any) -> Node | None:
    """``k`` when ``node`` is ``k.transpose(-2, -1)`` (either order, or as torch.transpose)."""
    if not _call(node, (torch.transpose,), ("transpose",)):
        return None
    k, a, b = node.args[0], _arg(node, 1, "dim0"), _arg(node, 2, "dim1")
    shape = _shape(k)
    if shape is None or len(shape) < 2 or not isinstance(a, int) or not isinstance(b, int):
        return None
    n = len(shape)
    return k if {a % n, b % n} == {n - 2, n - 1} else None  # type: ignore[return-value]


def _scalar(value: Any) -> bool:
    """A python number, or a graph value that is one (a shape's size, math.sqrt of it)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return True
    return isinstance(value, Node) and bool(value.meta.get("scalar"))


def _match(gm: torch.fx.GraphModule, out: Node) -> dict[str, Any] | None:
    """The parts of the pattern ending in ``out`` (probs @ v), or None."""
    if not _call(out, MATMULS, ("matmul", "bmm")) or len(out.args) != 2:
        return None
    probs, v = out.args
    if not isinstance(probs, Node) or not _only_user(probs, out):
        return None
    viewed = _regroups_batch(probs)
    if viewed is not None:  # probs.view(B * H, L, S) @ v
        probs = viewed if _only_user(viewed, probs) else None
        if probs is None:
            return None
    if _call(probs, DROPOUTS, ("dropout",)) and _arg(probs, 1, "p", 0.5) == 0:
        probs = _input(probs)
    elif (drop := _module(gm, probs, torch.nn.Dropout)) is not None and drop.p == 0:
        probs = _input(probs)
    if probs is not None and _same_dtype_cast(probs):  # softmax(...).to(q.dtype) on fp32
        probs = _input(probs)
    if probs is None:
        return None
    shape = _shape(probs)
    if shape is None:
        return None
    soft = _module(gm, probs, torch.nn.Softmax)
    if soft is not None:
        dim = soft.dim
    elif _call(probs, SOFTMAXES, ("softmax",)) and not _casts(probs):
        dim = _arg(probs, 1, "dim")
    else:
        return None
    if not _last_dim(dim, len(shape)):
        return None
    found = _scores(probs.args[0], probs, v)
    if found is None or _shape(out) != (*_shape(found["q"])[:-1], _shape(v)[-1]):  # type: ignore[index]
        return None  # the views did not come back to q's batch dimensions
    return _grouped(found)


def _input(node: Node) -> Node | None:
    """The input of a no-op (dropout with p = 0, a cast to the same dtype) when it has no other user."""
    inner = node.args[0]
    return inner if isinstance(inner, Node) and _only_user(inner, node) else None


def _same_dtype_cast(node: Node) -> bool:
    """``x.to(dtype)`` or ``x.type(dtype)`` (a dtype, or another tensor's ``.dtype``) that leaves
    x's dtype as it is: no cast."""
    if not _call(node, (), ("to", "type")) or len(node.args) != 2 or node.kwargs:
        return False
    target = node.args[1]
    named = isinstance(target, torch.dtype) or (
        _call(target, (getattr,)) and len(target.args) == 2 and target.args[1] == "dtype"  # type: ignore[union-attr]
    )
    before, after = (n.meta.get("tensor_meta") for n in (node.args[0], node) if isinstance(n, Node))  # type: ignore[misc]
    return named and getattr(before, "dtype", 0) == getattr(after, "dtype", 1)


def _casts(softmax: Node) -> bool:
    """Whether the softmax casts (SDPA's output keeps the input's dtype): a dtype named that is
    not the scores' own (transformers' ``softmax(scores, dtype=torch.float32)`` on fp32 scores
    does not cast)."""
    values = [*softmax.args[2:], softmax.kwargs.get("dtype")]
    meta = softmax.args[0].meta.get("tensor_meta") if isinstance(softmax.args[0], Node) else None
    own = getattr(meta, "dtype", None)
    return any(isinstance(v, torch.dtype) and v != own for v in values)


def _scores(node: Any, user: Node, v: Any) -> dict[str, Any] | None:
    """Walk back from softmax's input through at most one mask fill, one additive mask, one
    scale (or baddbmm's bias and alpha) and views that regroup the batch to q @ k^T."""
    found: dict[str, Any] = {"v": v, "scale": 1.0, "mask": None, "bias": None, "finite": False}
    views = 0  # a mask found before a view (walking back) is over the view's batch dims
    masks: list[tuple[int, Any]] = []  # (views passed when found, mask)
    while isinstance(node, Node) and _only_user(node, user):
        if _call(node, MATMULS, ("matmul", "bmm")) and len(node.args) == 2:
            if any(seen < views and not _batch_free(mask) for seen, mask in masks):
                return None  # a mask over the viewed batch dims would mean another thing in q's
            return _qk(found, node, node.args[0], node.args[1])
        if _call(node, (torch.baddbmm,), ("baddbmm",)) and len(node.args) == 3:
            bias, q, kt = node.args
            alpha, beta = node.kwargs.get("alpha", 1), node.kwargs.get("beta", 1)
            if set(node.kwargs) - {"alpha", "beta"} or beta != 1 or not _scalar(alpha):
                return None
            if found["scale"] != 1.0 or found["bias"] is not None or not isinstance(bias, Node):
                return None  # a later scale would scale the bias too; one bias
            if found["mask"] is not None and found["mask"][0] != "fill":
                return None
            if _dtype(bias) != _dtype(node):
                return None
            found["bias"] = bias  # q's batch dims: baddbmm broadcasts it to the scores' shape
            if alpha != 1:
                found["scale"] = ("mul", alpha)
            if any(seen < views and not _batch_free(mask) for seen, mask in masks):
                return None
            return _qk(found, node, q, kt)
        if _regroups_batch(node) is not None:
            views += 1
        elif _call(node, (operator.truediv, torch.div), ("div",)) and _scalar(node.args[1]):
            if found["scale"] != 1.0:
                return None  # two scales
            found["scale"] = ("div", node.args[1])
        elif _call(node, (operator.mul, torch.mul), ("mul",)) and _scalar(node.args[1]):
            if found["scale"] != 1.0:
                return None
            found["scale"] = ("mul", node.args[1])
        elif _call(node, (torch.masked_fill,), ("masked_fill",)) and found["mask"] is None:
            value = _arg(node, 2, "value")
            if isinstance(value, float) and math.isinf(value) and value < 0:
                pass
            elif _very_negative(value):
                found["finite"] = True  # taken only if the mask proves causal (sdpa_attention)
            else:
                return None  # a finite fill is not the same function on a fully masked row
            masks.append((views, node.args[1]))
            found["mask"] = ("fill", node.args[1])
        elif _call(node, (operator.add, torch.add), ("add",)) and found["bias"] is None:
            if found["scale"] != 1.0:
                return None  # walking back, the scale came first: the mask is added before it
            if len(node.args) != 2 or not isinstance(node.args[1], Node) or _shape(node.args[1]) is None:
                return None
            if node.kwargs.get("alpha", 1) != 1 or _dtype(node.args[1]) != _dtype(node):
                return None  # a bool "added" is a keep-mask to SDPA, not a bias
            masks.append((views, node.args[1]))
            if found["mask"] is None:
                found["mask"] = ("add", node.args[1])
            elif found["mask"][0] == "fill":
                found["bias"] = node.args[1]  # a fill came after: the two join (sdpa_attention)
            else:
                return None  # two additive masks
        else:
            return None
        user, node = node, node.args[0]
    return None


def _dtype(node: Any) -> Any:
    meta = node.meta.get("tensor_meta") if isinstance(node, Node) else None
    return getattr(meta, "dtype", None)


def _qk(found: dict[str, Any], scores: Node, q: Any, kt: Any) -> dict[str, Any] | None:
    """``found`` completed with q and k when ``kt`` is k transposed, used by ``scores`` alone."""
    k = _transposed_last_two(kt)
    if k is None or not _only_user(kt, scores):
        return None
    found |= {"q": q, "k": k}
    return found if _same_batch(found) else None


def _same_batch(found: dict[str, Any]) -> bool:
    """q (..., L, E), k (..., S, E), v (..., S, Ev) with the same batch dimensions (no broadcasting)."""
    q, k, v = (_shape(found[name]) for name in ("q", "k", "v"))
    if q is None or k is None or v is None or not len(q) == len(k) == len(v) >= 3:
        return False
    return q[:-2] == k[:-2] == v[:-2] and q[-1] == k[-1] and k[-2] == v[-2]


def _repeated_heads(node: Any) -> tuple[Node, int] | None:
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
    if not _call(node, (torch.reshape,), ("reshape", "view")) or not _only_user(node.args[0], node):
        return None
    expanded = node.args[0]
    if not _call(expanded, (), ("expand",)) or not _only_user(expanded.args[0], expanded):
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


def _grouped(found: dict[str, Any]) -> dict[str, Any]:
    """``found`` with k and v unrepeated and ``gqa`` set, when both repeat their heads the same
    number of times (else as it was)."""
    k, v = _repeated_heads(found["k"]), _repeated_heads(found["v"])
    if k is None or v is None or k[1] != v[1] or k[1] < 2:
        return found
    return {**found, "k": k[0], "v": v[0], "gqa": True}


def _ones(node: Any, size: tuple[int, int]) -> bool:
    """``torch.ones(L, S, ...)`` (any dtype, any device) of exactly ``size``."""
    return _call(node, (torch.ones,)) and _shape(node) == size


def real_buffers(task_path: Path, meta_model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The task's buffers with their values (a causal mask registered in ``__init__``): the
    Model built once more on the CPU, when its parameters and buffers are small enough."""
    state = [*meta_model.parameters(), *meta_model.buffers()]
    if not any(True for _ in meta_model.buffers()):
        return {}
    if sum(t.numel() * t.element_size() for t in state) > BUFFER_READ_MAX_BYTES:
        return {}
    try:
        module = import_file(task_path, f"kforge_buffers_{uuid.uuid4().hex[:8]}")
        with torch.device("cpu"):
            torch.manual_seed(0)
            model = module.Model(*module.get_init_inputs())
        return dict(model.named_buffers())
    except Exception:  # the task's own code: no values, no is_causal from a buffer
        return {}


Buffers = Callable[[], dict[str, torch.Tensor]]  # read only when a pattern needs a buffer's value


def _sliced_buffer(node: Any, buffers: Buffers, size: tuple[int, int]) -> torch.Tensor | None:
    """The value of ``buffer[..., :L, :S]`` (a slice from the start on the last two dims,
    whole on the others), or of the buffer itself when it is that size, when ``node`` is one
    of these and the buffer's value is known."""
    if isinstance(node, Node) and node.op == "get_attr":
        value = buffers().get(str(node.target))
        return value if value is not None and tuple(value.shape[-2:]) == size else None
    if not _call(node, (operator.getitem,)) or not isinstance(node.args[0], Node):
        return None
    attr, index = node.args
    if attr.op != "get_attr" or not isinstance(index, tuple):
        return None
    value = buffers().get(str(attr.target))
    if value is None:
        return None
    if len(index) != value.dim() or not all(
        isinstance(i, slice) and i.start is None and i.step is None for i in index
    ):
        return None
    shape = _shape(node)
    if any(i.stop is not None for i in index[:-2]) or shape is None or shape[-2:] != size:
        return None
    return value[..., : size[0], : size[1]]  # the stops are the traced sizes: the node's shape says them


def _causal(mask: Any, q: tuple[int, ...] | None, k: tuple[int, ...] | None, buffers: Buffers) -> bool:
    """Whether ``mask`` (True = masked) is the causal one, the size of the scores: built in the
    forward (``triu(ones(L, S), diagonal=1)``, ``tril(ones(L, S)) == 0``) or read from a buffer
    whose value is known (``tril_buffer[:, :, :L, :S] == 0``). SDPA's ``is_causal`` masks the
    same (top-left aligned) entries."""
    if q is None or k is None:
        return False
    size = (q[-2], k[-2])
    value = _sliced_buffer(mask, buffers, size)  # a boolean buffer, True above the diagonal
    if value is not None and value.dtype == torch.bool:
        return bool(torch.equal(value, torch.ones(size, dtype=torch.bool).triu(1).expand_as(value)))
    if _call(mask, (operator.eq, torch.eq), ("eq",)) and mask.args[1] == 0:
        value = _sliced_buffer(mask.args[0], buffers, size)
        if value is not None:
            keep = torch.ones(size, dtype=torch.bool).tril()
            return bool(torch.equal(value != 0, keep.expand_as(value)))
    if _call(mask, (torch.triu,), ("triu",)) and _arg(mask, 1, "diagonal", 0) == 1:
        return _ones(mask.args[0], size)
    if _call(mask, (operator.eq, torch.eq), ("eq",)) and mask.args[1] == 0:
        tril = mask.args[0]
        return (
            _call(tril, (torch.tril,), ("tril",))
            and _arg(tril, 1, "diagonal", 0) == 0
            and _ones(tril.args[0], size)
        )
    return False


def _causal_bias(mask: Any, q: tuple[int, ...] | None, k: tuple[int, ...] | None, buffers: Buffers) -> bool:
    """Whether the additive ``mask`` is the causal one: a buffer's value, sliced to the scores'
    size, that is 0 on and below the diagonal and -inf above (``full(-inf).triu(1)``, as
    transformers' eager attention adds it)."""
    if q is None or k is None:
        return False
    size = (q[-2], k[-2])
    value = _sliced_buffer(mask, buffers, size)
    if value is None or not value.is_floating_point():
        return False
    causal = torch.zeros(size, dtype=value.dtype).masked_fill(
        torch.ones(size, dtype=torch.bool).triu(1), -math.inf
    )
    return bool(torch.equal(value, causal.expand_as(value)))


def _in_q_dims(graph: torch.fx.Graph, mask: Node, q: tuple[int, ...]) -> Node:
    """``mask`` with the dims it has beyond q's dropped, when they are 1 (a mask found over the
    viewed batch dimensions, which _scores accepts only batch-free)."""
    shape = _shape(mask)
    if shape is None or len(shape) <= len(q):
        return mask
    return graph.call_method("reshape", (mask, *shape[-2:]))


def sdpa_attention(gm: torch.fx.GraphModule) -> int:
    """Rewrite every hand-written attention in ``gm`` (shapes propagated); returns how many."""
    graph, count = gm.graph, 0
    buffers: Buffers = gm.meta.get("buffers") or dict  # values, where known (real_buffers)
    for out in list(graph.nodes):
        found = _match(gm, out)
        if found is None:
            continue
        q, k = _shape(found["q"]), _shape(found["k"])
        how, mask = found["mask"] or (None, None)
        bias = found["bias"]
        causal = (how == "fill" and _causal(mask, q, k, buffers)) or (
            how == "add" and _causal_bias(mask, q, k, buffers)
        )
        if found["finite"] and not causal:
            continue  # a finite fill equals -inf's only where every row keeps a key
        with graph.inserting_before(out):
            scale: Any = 1.0
            if isinstance(found["scale"], tuple):
                how_scaled, value = found["scale"]
                if how_scaled == "mul":
                    scale = value
                elif isinstance(value, int | float):  # a number: SDPA's scale stays a number
                    scale = 1.0 / value
                else:
                    scale = graph.call_function(operator.truediv, (1.0, value))
            kwargs: dict[str, Any] = {"scale": scale}
            if how is not None:
                mask = _in_q_dims(graph, mask, q)  # type: ignore[arg-type]
            if bias is not None and how is None:  # baddbmm's bias alone: an additive mask
                kwargs["attn_mask"] = bias
            elif bias is not None:  # a fill and a bias: one mask (SDPA takes one)
                joined = graph.call_function(torch.where, (mask, -math.inf, bias))
                if causal:
                    joined.meta[CAUSAL_KEY_BIAS] = bias
                kwargs["attn_mask"] = joined
            elif causal:
                kwargs["is_causal"] = True  # kernels skip the masked blocks
            elif how == "fill":
                kwargs["attn_mask"] = graph.call_function(torch.logical_not, (mask,))
            elif how == "add":
                kwargs["attn_mask"] = mask
            if found.get("gqa"):
                kwargs["enable_gqa"] = True
            attention = graph.call_function(
                F.scaled_dot_product_attention, (found["q"], found["k"], found["v"]), kwargs
            )
        out.replace_all_uses_with(attention)
        graph.erase_node(out)
        count += 1
    return count
