"""The flash kernel's operands, checked and shaped on the host (no Triton here): why a call's
q, k, v and masks are not something :mod:`.attention` computes, and its masks sorted into what
the kernel reads (a key row, a tile, the decomposed relative positions' two tables)."""

from __future__ import annotations

import torch

MAX_HEAD_DIM = 256  # above 128 (Gemma's 256), smaller tiles: attention._wide_configs


def heads(t: torch.Tensor) -> torch.Tensor:
    """(N, L, D) as (N, 1, L, D): one head per batch entry (attention over bmm's batch)."""
    return t.unsqueeze(1) if t.dim() == 3 else t


def unsupported(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    enable_gqa: bool = False,
    bias: torch.Tensor | None = None,
) -> str:
    """Why this kernel cannot compute attention of these operands ("" when it can)."""
    if any(t.dtype != torch.float32 for t in (q, k, v)):
        return "not fp32"
    if not q.dim() == k.dim() == v.dim() or q.dim() not in (3, 4):
        return "not (batch, heads, length, dim) or (batch, length, dim)"
    (b, hq, _, d), (bk, hk, s, dk), (bv, hv, sv, dv) = (heads(t).shape for t in (q, k, v))
    if not b == bk == bv or hk != hv or s != sv:
        return "batch, key heads or key length differ"
    if not d == dk == dv or d > MAX_HEAD_DIM:
        return f"head dims {d}, {dk}, {dv}: equal and at most {MAX_HEAD_DIM}"
    if hk == 0 or hq % hk or (hq != hk and not enable_gqa):
        return "query heads not a multiple of key heads under enable_gqa"
    if bias is not None:
        if bias.dtype != torch.float32 or bias.dim() > q.dim():
            return "the mask is not an fp32 additive bias"
        scores = (*q.shape[:-1], s)
        try:
            broadcast = torch.broadcast_shapes(bias.shape, scores) == scores
        except RuntimeError:
            broadcast = False
        if not broadcast:
            return f"the mask {tuple(bias.shape)} does not broadcast to the scores {scores}"
    return ""


def unsupported_rel(q: torch.Tensor, k: torch.Tensor, rel_h: torch.Tensor, rel_w: torch.Tensor) -> str:
    """Why ``rel_h`` and ``rel_w`` are not decomposed relative positions of this attention's keys
    ("" when they are): fp32, broadcasting to (*q's dims but the last, KH) and (..., KW), KH * KW
    the keys' count."""
    if rel_h.dtype != torch.float32 or rel_w.dtype != torch.float32:
        return "the relative-position tables are not fp32"
    kh, kw = rel_h.shape[-1], rel_w.shape[-1]
    if kh * kw != k.shape[-2]:
        return f"a {kh} x {kw} key grid for {k.shape[-2]} keys"
    for table, size in ((rel_h, kh), (rel_w, kw)):
        want = (*q.shape[:-1], size)
        try:
            fits = table.dim() <= q.dim() and torch.broadcast_shapes(table.shape, want) == want
        except RuntimeError:
            fits = False
        if not fits:
            return f"the relative-position table {tuple(table.shape)} does not broadcast to {want}"
    return ""


def unsupported_all(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    key_bias: torch.Tensor | None,
    rel_h: torch.Tensor | None,
    rel_w: torch.Tensor | None,
) -> str:
    """Why the kernel cannot take this call (grouped heads allowed), "" when it can."""
    why = unsupported(q, k, v, True, bias) or (
        unsupported(q, k, v, True, key_bias) if key_bias is not None else ""
    )
    if (rel_h is None) != (rel_w is None):
        return why or "rel_h and rel_w go together"
    if rel_h is not None and rel_w is not None:
        return why or unsupported_rel(q, k, rel_h, rel_w)
    return why


def masks(
    q: torch.Tensor,
    k: torch.Tensor,
    bias: torch.Tensor | None,
    key_bias: torch.Tensor | None,
    rel_h: torch.Tensor | None,
    rel_w: torch.Tensor | None,
) -> tuple[torch.Tensor | None, torch.Tensor | None, list[torch.Tensor]]:
    """(the key row, the tile, the relative-position tables): the row and the tile (B, Hq, L, S)
    views, either None; the tables (B, Hq, L, KH) and (B, Hq, L, KW), or no table. A mask that
    broadcasts over the queries is a row, another a tile (two of a kind are added first)."""
    scores = (*q.shape[:-1], k.shape[-2])
    rows: list[torch.Tensor] = []
    tiles: list[torch.Tensor] = []
    for mask in (bias, key_bias):
        if mask is None:
            continue
        if mask.shape[-1] > 1 and mask.stride(-1) != 1:
            # keys not adjacent (T5's bias is a permuted (L, S, H) embedding): the kernel's
            # loads would read one float per 32-byte sector; one copy of the mask as given
            mask = mask.contiguous()
        (rows if mask.expand(scores).stride(-2) == 0 else tiles).append(mask)
    row, tile = (None if not m else m[0] if len(m) == 1 else m[0] + m[1] for m in (rows, tiles))
    row, tile = (None if m is None else heads(m.expand(scores)) for m in (row, tile))
    rel = [heads(t.expand(*scores[:-1], t.shape[-1])) for t in (rel_h, rel_w) if t is not None]
    return row, tile, rel
