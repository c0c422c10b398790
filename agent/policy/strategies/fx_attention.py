"""Attention written out by hand, rewritten to ``scaled_dot_product_attention`` on the FX graph.

The pattern, as models write it::

    scores = q @ k.transpose(-2, -1)          # torch.matmul / @ / torch.bmm
    scores = scores / math.sqrt(d)            # or * scale; optional
    scores = scores.masked_fill(mask, -inf)   # or + additive_mask; optional
    probs = softmax(scores, dim=-1)           # torch / F / method / nn.Softmax
    probs = dropout(probs)                    # only with p = 0 or in eval mode (a no-op)
    out = probs @ v

becomes ``F.scaled_dot_product_attention(q, k, v, attn_mask=..., scale=...)``, which never
writes the (L, S) score and probability matrices to memory (flash or memory-efficient
kernels; in strict fp32 the memory-efficient one, which computes in fp32). It is the same
function: the scale is passed as the pattern computes it (1.0 when it has none), a
``masked_fill(m, -inf)`` becomes the boolean mask ``~m``, an additive mask is passed as it is.
Also transformers' eager form: key and value heads repeated for grouped-query attention
(``repeat_kv`` or ``repeat_interleave``), or one key head the matmul broadcasts over the query
heads (Falcon's multi-query attention), become the unrepeated tensors with ``enable_gqa``; a
causal mask added from a buffer (0 on and below the diagonal, -inf above) becomes
``is_causal``; ``softmax(..., dtype=torch.float32)`` on fp32 scores is no cast. BLOOM's form too: the
scores as ``baddbmm(bias, q, k^T, alpha=scale)`` over a flat (batch * heads) dimension,
viewed as (batch, heads) for the mask and back for the product (views that only regroup the
dimensions before the last two are dropped, the attention computed in q's), the causal mask
filled with ``torch.finfo(dtype).min``. A finite fill of at most -1e9 is taken where the
mask is proved causal: every row then keeps its diagonal, and exp(fill - row max) is 0 as
exp(-inf) is unless a kept score is itself below about -1e9. Elsewhere an fp32 fill of at most
-1e30 (``finfo.min``) is taken as the additive mask ``where(mask, fill, 0)``: any score added
to it rounds to the fill, the same values on every row. A mask fill and an additive
bias together become one ``attn_mask`` (``where(mask, -inf, bias)``); when the fill is
causal, the node carries the bias under ``CAUSAL_KEY_BIAS`` so that a kernel taking a key
bias and the causal mask together (the 3xTF32 flash attention) need not read that (L, S)
mask. Decomposed relative positions (SAM's, ViTDet's and MViTv2's ``add_decomposed_rel_pos``:
``(scores.view(B, qh, qw, kh, kw) + rel_h[..., None] + rel_w[..., None, :]).view(B, L, S)``) are
taken only for a kernel that reads the two tables (``decomposed``, the 3xTF32 flash attention):
the node carries them under ``DECOMPOSED`` beside the (B, L, S) mask PyTorch's SDPA would need.
Anything else (intermediates used elsewhere, the probabilities returned, a fill above -1e30
on a mask not proved causal, an additive mask before the scale, batch dimensions that
broadcast) is left alone.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from .fx_masks import FLOORED as FLOORED  # the 3xTF32 pass reads it through here
from .fx_masks import (
    Buffers,
    batch_free,
    causal_bias,
    far_negative,
    floored,
    in_q_dims,
    very_negative,
    window,
)
from .fx_masks import arg as _arg
from .fx_masks import call as _call
from .fx_masks import causal as is_causal_mask
from .fx_masks import real_buffers as real_buffers  # the registry reads buffers through here
from .fx_masks import shape as _shape
from .fx_operands import (
    Swapped,
    batch_viewed,
    casts,
    dims,
    dtype_of,
    emitted,
    grouped,
    heads_broadcast,
    only_user,
    reads_attribute,
    regroups_batch,
    same_batch,
    same_dtype_cast,
    sdpa_scale,
    transposed_last_two,
    unexpanded,
)
from .fx_relpos import DECOMPOSED as DECOMPOSED  # the 3xTF32 pass reads it through here
from .fx_relpos import decomposed_bias, relative_mask

Node = torch.fx.Node
MATMULS = (torch.matmul, operator.matmul, torch.bmm)
SOFTMAXES = (torch.softmax, F.softmax, torch.nn.functional.softmax)
DROPOUTS = (F.dropout, torch.dropout)
CAUSAL_KEY_BIAS = "kforge_causal_key_bias"  # node meta: the bias a causal attn_mask was built from
CAUSAL_WINDOW = "kforge_causal_window"  # node meta: the window of the sliding-window causal attn_mask
FILLED = "kforge_filled"  # node meta: the mask a -inf fill read (True: filled), the keep mask's inverse


def _module(gm: torch.fx.GraphModule, node: Any, kind: type) -> Any:
    if isinstance(node, Node) and node.op == "call_module":
        mod = gm.get_submodule(str(node.target))
        return mod if isinstance(mod, kind) else None
    return None


def _last_dim(dim: Any, ndim: int) -> bool:
    return isinstance(dim, int) and dim in (-1, ndim - 1)


def _scalar(value: Any) -> bool:
    """A python number, or a graph value that is one (a shape's size, math.sqrt of it)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return True
    return isinstance(value, Node) and bool(value.meta.get("scalar"))


def _match(gm: torch.fx.GraphModule, out: Node) -> dict[str, Any] | None:
    """The parts of the pattern ending in ``out`` (probs @ v, or the channels-first
    ``v @ probs^T`` of Stable Diffusion's VAE and VQGAN, whose result is the transpose), or None."""
    if not _call(out, MATMULS, ("matmul", "bmm")) or len(out.args) != 2:
        return None
    found = _from_probs(gm, out, out.args[0], out.args[1])
    if found is not None:
        return found
    probs = transposed_last_two(out.args[1])
    if probs is None or not only_user(out.args[1], out) or not isinstance(out.args[0], Node):  # type: ignore[arg-type]
        return None
    found = _from_probs(gm, out.args[1], probs, Swapped(out.args[0]), swapped=True)  # type: ignore[arg-type]
    return None if found is None else {**found, "out_swapped": True}


def _from_probs(
    gm: torch.fx.GraphModule, out: Node, probs: Any, v: Any, swapped: bool = False
) -> dict[str, Any] | None:
    """The pattern from ``probs``, the softmax's output (through views, a dropout with p = 0, a
    cast to the same dtype) that ``out`` reads alone, to q @ k^T."""
    if not isinstance(probs, Node) or not only_user(probs, out):
        return None
    viewed = regroups_batch(probs)
    if viewed is not None:  # probs.view(B * H, L, S) @ v
        probs = viewed if only_user(viewed, probs) else None
        if probs is None:
            return None
    if _call(probs, DROPOUTS, ("dropout",)) and (
        _arg(probs, 1, "p", 0.5) == 0 or _arg(probs, 2, "training", True) is False
    ):
        probs = _input(probs)
    elif (drop := _module(gm, probs, torch.nn.Dropout)) is not None and (drop.p == 0 or not drop.training):
        probs = _input(probs)  # p = 0, or in eval mode (DistilBERT's p = 0.1 after its own .eval())
    if probs is not None and same_dtype_cast(probs):  # softmax(...).to(q.dtype) on fp32
        probs = _input(probs)
    if probs is None:
        return None
    shape = _shape(probs)
    if shape is None:
        return None
    soft = _module(gm, probs, torch.nn.Softmax)
    if soft is not None:
        dim = soft.dim
    elif _call(probs, SOFTMAXES, ("softmax",)) and not casts(probs):
        dim = _arg(probs, 1, "dim")
    else:
        return None
    if not _last_dim(dim, len(shape)):
        return None
    found = _scores(probs.args[0], probs, v)
    if found is None:
        return None
    result = (*_shape(found["q"])[:-1], dims(v)[-1])  # type: ignore[index,misc]
    if swapped:
        result = (*result[:-2], result[-1], result[-2])
        out = next(iter(out.users))  # the product v @ probs^T
    if _shape(out) != result:
        return None  # the views did not come back to q's batch dimensions
    return grouped(found)


def _input(node: Node) -> Node | None:
    """The input of a no-op (dropout with p = 0, a cast to the same dtype) when it has no other user."""
    inner = node.args[0]
    return inner if isinstance(inner, Node) and only_user(inner, node) else None


def _scaled(node: Node) -> str | None:
    """ "div" or "mul" where ``node`` divides or multiplies the scores by a scalar, else None."""
    if _call(node, (operator.truediv, torch.div), ("div",)) and _scalar(node.args[1]):
        return "div"
    return "mul" if _call(node, (operator.mul, torch.mul), ("mul",)) and _scalar(node.args[1]) else None


def _scores(node: Any, user: Node, v: Any) -> dict[str, Any] | None:
    """Walk back from softmax's input through at most one mask fill, one additive mask, one
    scale (or baddbmm's bias and alpha) and views that regroup the batch to q @ k^T."""
    found: dict[str, Any] = {"v": v, "scale": 1.0, "mask": None, "bias": None, "finite": False, "readers": []}
    views = 0  # a mask found before a view (walking back) is over the view's batch dims
    masks: list[tuple[int, Any]] = []  # (views passed when found, mask)
    at: Any = None  # the scores' shape where the masks are applied
    while isinstance(node, Node) and only_user(node, user):
        found["readers"] += [u for u in node.users if reads_attribute(u)]  # to read q's instead
        matmul = _call(node, MATMULS, ("matmul", "bmm")) and len(node.args) == 2
        if matmul or (_call(node, (torch.baddbmm,), ("baddbmm",)) and len(node.args) == 3):
            if any(seen < views and not batch_free(mask) for seen, mask in masks):
                if len(masks) != 1 or at is None:
                    return None  # a mask over the viewed batch dims would mean another thing in q's
                found["batch_view"] = at[:-2]  # BART's: q, k and v viewed to the mask's dims
            return _qk(found, node, node.args[0], node.args[1]) if matmul else _baddbmm(found, node)
        if regroups_batch(node) is not None:
            views += 1
        elif same_dtype_cast(node):
            pass  # T5's softmax(scores.float()) on fp32 scores
        elif (how := _scaled(node)) is not None:
            if found["scale"] != 1.0:
                return None  # two scales
            found["scale"] = (how, node.args[1])
        elif _call(node, (torch.masked_fill,), ("masked_fill",)) and found["mask"] is None:
            value = _arg(node, 2, "value")
            if isinstance(value, float) and math.isinf(value) and value < 0:
                pass
            elif very_negative(value):
                found["finite"], found["fill"] = True, value  # causal, or far enough (sdpa_attention)
            else:
                return None  # a finite fill is not the same function on a fully masked row
            fill, at = unexpanded(node.args[1], node.args[0]), _shape(node)
            masks.append((views, fill))
            found["mask"] = ("fill", fill)
        elif found["mask"] is None and found["scale"] == 1.0 and not views and (rel := decomposed_bias(node)):
            found["rel"] = rel[1:]  # walking back, nothing came after it but the softmax (and casts)
            node = rel[0].args[0]  # the 5-D view of the scores (the first add reads it alone)
        elif _call(node, (operator.add, torch.add), ("add",)) and found["bias"] is None:
            if found["scale"] != 1.0:
                return None  # walking back, the scale came first: the mask is added before it
            if len(node.args) != 2 or not isinstance(node.args[1], Node) or _shape(node.args[1]) is None:
                return None
            if node.kwargs.get("alpha", 1) != 1 or dtype_of(node.args[1]) != dtype_of(node):
                return None  # a bool "added" is a keep-mask to SDPA, not a bias
            masks.append((views, node.args[1]))
            at = _shape(node)
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


def _baddbmm(found: dict[str, Any], node: Node) -> dict[str, Any] | None:
    """``found`` completed from BLOOM's ``baddbmm(bias, q, k^T, beta=1, alpha=scale)``: the bias
    added after the scale, in q's batch dimensions (baddbmm broadcasts it to the scores'); or
    from diffusers' ``baddbmm(torch.empty(...), q, k^T, beta=0, alpha=scale)``, whose first
    operand is ignored (beta 0: not even read, so the uninitialised values do not matter)."""
    bias, q, kt = node.args
    alpha, beta = node.kwargs.get("alpha", 1), node.kwargs.get("beta", 1)
    if set(node.kwargs) - {"alpha", "beta"} or beta not in (0, 1) or not _scalar(alpha):
        return None
    if found["scale"] != 1.0:
        return None  # two scales, or a later one that would scale the bias too
    if beta == 1:
        if found["bias"] is not None or not isinstance(bias, Node):
            return None  # one bias
        if (found["mask"] is not None and found["mask"][0] != "fill") or dtype_of(bias) != dtype_of(node):
            return None
        found["bias"] = bias
    if alpha != 1:
        found["scale"] = ("mul", alpha)
    return _qk(found, node, q, kt)


def _qk(found: dict[str, Any], scores: Node, q: Any, kt: Any) -> dict[str, Any] | None:
    """``found`` completed with q and k when ``kt`` is k transposed, used by ``scores`` alone."""
    k: Any = transposed_last_two(kt)
    if k is None and isinstance(kt, Node) and _shape(kt) is not None:
        k = Swapped(kt)  # channels-first keys (..., E, S): q @ k as it is
    elif k is None or not only_user(kt, scores):
        return None
    found |= {"q": q, "k": k}
    if same_batch(found):
        return found
    return {**found, "gqa": True} if heads_broadcast(found) else None


def sdpa_attention(gm: torch.fx.GraphModule, max_head_dim: int = 0, decomposed: bool = False) -> int:
    """Rewrite every hand-written attention in ``gm`` (shapes propagated); returns how many.
    ``max_head_dim`` > 0: leave alone an attention whose head dim is larger (its family's GEMM
    takes the two matmuls). ``decomposed``: decomposed relative positions too, for a family whose
    flash kernel reads their tables (PyTorch's SDPA would read their (L, S) sum from memory)."""
    graph, count = gm.graph, 0
    buffers: Buffers = gm.meta.get("buffers") or dict  # values, where known (real_buffers)
    for out in list(graph.nodes):
        found = _match(gm, out)
        plan = None if found is None else _plan(found, buffers, max_head_dim, decomposed)
        if found is None or plan is None:
            continue
        with graph.inserting_before(out):
            attention = _emit(graph, found, plan)
        for reader in found["readers"]:  # x.dtype, x.device of a replaced node: q's are the same
            reader.replace_input_with(reader.args[0], found["q"])
        out.replace_all_uses_with(attention)
        graph.erase_node(out)
        count += 1
    return count


def _plan(
    found: dict[str, Any], buffers: Buffers, max_head_dim: int, decomposed: bool
) -> dict[str, Any] | None:
    """What the rewrite of ``found`` passes SDPA (the mask's kind, causal, a window), or None
    where it would not be the same function."""
    q, k = _shape(found["q"]), dims(found["k"])
    rel = found.get("rel")  # decomposed relative positions: taken alone, for a kernel reading them
    alone = found["mask"] is None and found["bias"] is None
    if (max_head_dim and (q is None or q[-1] > max_head_dim)) or (rel and not (decomposed and alone)):
        return None
    how, mask = found["mask"] or (None, None)
    causal = (how == "fill" and is_causal_mask(mask, q, k, buffers)) or (
        how == "add" and causal_bias(mask, q, k, buffers)
    )
    slide = None
    if how is not None and not causal and found["bias"] is None:
        slide = window(mask, how, q, k, buffers)
        causal = slide == 0
    if found["finite"] and not (causal or slide):  # -inf's equal only where every row keeps a key
        if found["bias"] is not None or not far_negative(found["fill"]):
            return None
        how = "far"  # else the fill added: the same values (DeBERTa's finfo.min padding)
    view = found.get("batch_view")  # BART's mask over the (B, H) view: only a plain mask there
    if view is not None and (found.get("gqa") or found.get("out_swapped") or rel or causal or slide):
        return None
    return {
        "q": q,
        "k": k,
        "how": how,
        "mask": mask,
        "causal": causal,
        "window": slide,
        "rel": rel,
        "view": view,
    }


def _emit(graph: torch.fx.Graph, found: dict[str, Any], plan: dict[str, Any]) -> Node:
    """The SDPA call (and the views around it) in place of ``found``'s pattern."""
    how, mask, bias, causal, q = plan["how"], plan["mask"], found["bias"], plan["causal"], plan["q"]
    kwargs: dict[str, Any] = {"scale": sdpa_scale(graph, found["scale"])}
    if how is not None and plan["view"] is None:
        mask = in_q_dims(graph, mask, q)
    if bias is not None and how is None:  # baddbmm's bias alone: an additive mask
        kwargs["attn_mask"] = floored(graph, bias)
    elif bias is not None:  # a fill and a bias: one mask (SDPA takes one)
        joined = graph.call_function(torch.where, (mask, -math.inf, floored(graph, bias)))
        if causal:
            joined.meta[CAUSAL_KEY_BIAS] = bias
        kwargs["attn_mask"] = joined
    elif causal:
        kwargs["is_causal"] = True  # kernels skip the masked blocks
    elif how == "fill":
        kwargs["attn_mask"] = graph.call_function(torch.logical_not, (mask,))
        kwargs["attn_mask"].meta[FILLED] = mask  # for a kernel taking an additive mask
    elif how == "add":
        kwargs["attn_mask"] = floored(graph, mask)
    elif how == "far":
        kwargs["attn_mask"] = floored(graph, graph.call_function(torch.where, (mask, found["fill"], 0.0)))
    if plan["window"]:  # for a kernel with a sliding window (the 3xTF32 flash attention)
        kwargs["attn_mask"].meta[CAUSAL_WINDOW] = plan["window"]
    if plan["rel"] is not None:
        kwargs["attn_mask"] = relative_mask(graph, plan["rel"], q[-2])
    if found.get("gqa"):
        kwargs["enable_gqa"] = True
    qkv = [found["q"], emitted(graph, found["k"]), emitted(graph, found["v"])]
    shapes = (q, plan["k"], dims(found["v"]))
    attention = graph.call_function(
        F.scaled_dot_product_attention, tuple(batch_viewed(graph, qkv, shapes, plan["view"])), kwargs
    )
    if plan["view"] is not None:  # the output back in q's batch dims
        attention = graph.call_method("reshape", (attention, *q[:-1], shapes[2][-1]))  # type: ignore[index]
    if found.get("out_swapped"):
        attention = graph.call_method("transpose", (attention, -2, -1))
    return attention
