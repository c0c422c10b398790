"""Scaled dot-product attention at fp32 accuracy on tensor cores: flash attention with 3xTF32.

In strict fp32, ``F.scaled_dot_product_attention`` runs the memory-efficient kernel on the
FP32 CUDA cores (flash attention has no fp32 path), and torch.compile keeps that call. This
kernel is flash attention (one program per BLOCK_M query rows of one head: Q on chip, K and V
swept in BLOCK_N-row tiles, an online softmax, the (L, S) scores never in memory) whose two
products are 3xTF32, as in :mod:`.tf32x3`: each operand tile is split in registers into a TF32
big part and its TF32-rounded remainder, and each product is the three TF32 dots
big*big + big*small + small*big, started from zero and added to an fp32 sum outside the
tensor cores. Q K^T has K = head_dim per dot (64 to 256), and P V adds one key block's
products per step, so no long sum stays in the tensor cores' accumulator, whose rounding
error grows with its length (bench/bench_tf32_accumulate.py). The softmax (max, exp2, sums,
rescaling) is fp32.

Semantics are ``scaled_dot_product_attention(q, k, v, is_causal=..., scale=...,
enable_gqa=...)`` without dropout, and a causal mask may be a sliding window (Mistral's,
Gemma's local layers: key j seen by query i when i - window < j <= i; the key blocks before
a query block's window are skipped): (B, Hq, L, D) queries, (B, Hkv, S, D) keys and
values with Hq a multiple of Hkv (query head h reads key head h // (Hq / Hkv), as
``enable_gqa`` does), a causal mask aligned top-left (key j is seen by query i when j <= i),
the scale 1/sqrt(D) when none is given. Any strides; the output is contiguous. The mask it
takes is an additive fp32 bias that broadcasts to (B, Hq, L, S), added after the scale as
SDPA adds ``attn_mask``, together with the causal mask or not (SDPA itself takes one or the
other): a key bias, the same row for every query (a padding mask, ALiBi's per-head slope
times the key's position), read as one row per key tile; or a bias per query and key (T5's
and Swin's relative-position bias, with a padding mask added), read as a tile; or a bias in
decomposed relative positions (SAM's and ViTDet's windowed and global attention, MViTv2's): keys
on a KH x KW grid, and the bias of query i and key j = a * KW + b the sum rel_h[i, a] +
rel_w[i, b] of two small tables, read per key tile where PyTorch adds them into the (L, S)
scores in memory. A row whose
every key is masked with -inf gives NaN, as PyTorch's math path does; one masked with
``finfo.min`` gives it equal weights, as PyTorch's softmax does.

A tile alone (no key bias beside it) is also read as a map of CELL x CELL cells: the key
blocks whose cells are all at most SKIP_BELOW are passed over, as the causal mask's are. That
is the same softmax wherever a skipped score, at most |q| max|k| |scale| + SKIP_BELOW, lies
more than 200 (log2 units) below its row's maximum, so that exp2 gives 0 there in fp32; a block
with a row where that is not so (a row with every key masked, whose equal weights or NaN come
from every key; inf or NaN in q, k or v) is swept again without skipping. A mask built from the
inputs (Mistral's window and padding, which the analysis cannot prove a window) then costs
the blocks it keeps, not all of them.

kforge's own kernel, tested against float64 (tests/test_tf32x3_attention.py); candidates call
it through ``sdpa``: the custom op ``kforge::tf32x3_sdpa`` under torch.compile (one graph).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..launch import Tuned, cdiv, eager_or_op, next_power_of_2
from .attention_operands import MAX_HEAD_DIM as MAX_HEAD_DIM  # the strategies read it here
from .attention_operands import heads, masks, unsupported_all
from .attention_operands import unsupported as unsupported
from .attention_operands import unsupported_rel as unsupported_rel
from .tf32x3 import _tf32_round

LOG2E = 1.4426950408889634
# A bias tile (the per-query-and-key mask) is read in CELL x CELL cells: where every value of a
# cell is at most SKIP_BELOW the kernel passes over the key blocks it covers (a mask built from
# the inputs, which the analysis cannot prove causal or a window: Mistral's, with its padding,
# had every key block swept, 2026-11-28). CELL divides every tile size.
CELL: tl.constexpr = tl.constexpr(16)
SKIP_BELOW: tl.constexpr = tl.constexpr(-1e30)
SKIP_MASKED = True  # tests turn it off to compare the sweep without skipping, bit for bit


@triton.jit
def _parts(ptrs, mask):
    """A tile's exact TF32 parts, split in registers. (Split once before the kernel, in memory
    as the GEMM does, K and V were slower at all three models' shapes on the H200:
    docs/log/2026-11-26-flash-attention-tf32x3.md.)"""
    x = tl.load(ptrs, mask=mask, other=0.0)
    big = _tf32_round(x)
    return big, _tf32_round(x - big)


@triton.jit
def _dot3(a_big, a_small, b_big, b_small):
    """a @ b in fp32 accuracy: three TF32 dots of exact TF32 parts, summed from zero."""
    part = tl.dot(a_small, b_big, input_precision="tf32")
    part = tl.dot(a_big, b_small, part, input_precision="tf32")
    return tl.dot(a_big, b_big, part, input_precision="tf32")


@triton.jit
def _log2_units(bias):
    """An additive mask in the kernel's log2 units. A fill below -2.3e38 (``finfo.min``, as
    transformers fills padding) would overflow to -inf there, and a row of it would give NaN
    where PyTorch's softmax gives equal weights (ModernBERT's padded queries past the window,
    2026-11-27): it is kept at -2.3e38, whose multiple stays finite. -inf stays -inf."""
    low = (bias < -2.3e38) & (bias > float("-inf"))
    return tl.where(low, -2.3e38, bias) * 1.4426950408889634  # log2(e), as in qk_scale


@triton.jit
def _sweep(
    q_big, q_small, k_base, v_base, bias_base, row_base, skip_base, rh_base, rw_base, rows, pid_m, L, S,
    qk_scale, WINDOW, KW,
    stride_ks, stride_kd, stride_vs, stride_vd, stride_bl, stride_bs, stride_rs, stride_cq, stride_ck,
    stride_hl, stride_hk, stride_wl, stride_wk,
    CAUSAL: tl.constexpr, BIAS: tl.constexpr, SKIP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, D,
):  # fmt: skip
    """The online softmax over the key blocks of one query block: (row max, row sum, the
    unnormalised output, whether a block was skipped). ``BIAS``'s bits: 1 a key row, 2 a tile, 4
    the decomposed relative positions (``rh_base``, ``rw_base``: the query's rows of the two
    tables, KW keys a grid row). ``SKIP``: pass over the key blocks whose every bias cell is at
    most SKIP_BELOW (``skip_base``: one int8 a CELL x CELL cell)."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    skipped = tl.sum(tl.zeros((BLOCK_M,), dtype=tl.int32), 0)  # an int32 the loop carries
    lo = 0
    hi = S
    if CAUSAL:  # under a sliding window too: key j seen by query i when i - WINDOW < j <= i
        hi = tl.minimum(S, (pid_m + 1) * BLOCK_M)
        lo = tl.maximum(0, pid_m * BLOCK_M - WINDOW + 1) // BLOCK_N * BLOCK_N
    for start in range(lo, hi, BLOCK_N):
        masked = 0
        if SKIP:  # the cells under this (query block, key block) tile, past the ends counted masked
            cq = pid_m * (BLOCK_M // CELL) + tl.arange(0, BLOCK_M // CELL)
            ck = start // CELL + tl.arange(0, BLOCK_N // CELL)
            cells = tl.load(
                skip_base + cq[:, None].to(tl.int64) * stride_cq + ck[None, :].to(tl.int64) * stride_ck,
                mask=(cq[:, None] * CELL < L) & (ck[None, :] * CELL < S),
                other=1,
            )
            masked = tl.min(tl.min(cells, 1), 0).to(tl.int32)
        if masked == 0:
            cols = start + offs_n
            k_big, k_small = _parts(
                k_base + cols[None, :].to(tl.int64) * stride_ks + offs_d[:, None] * stride_kd,
                (cols[None, :] < S) & mask_d[:, None],
            )
            s = _dot3(q_big, q_small, k_big, k_small) * qk_scale  # log2 units: exp2 below
            if BIAS % 2 == 1:  # a key bias: one row for every query (a padding mask, ALiBi)
                bias = tl.load(row_base + cols.to(tl.int64) * stride_rs, mask=cols < S, other=0.0)
                s += _log2_units(bias)[None, :]
            if (BIAS // 2) % 2 == 1:  # a bias per query and key (T5's position bias, Swin's)
                tile = (
                    bias_base
                    + rows[:, None].to(tl.int64) * stride_bl
                    + cols[None, :].to(tl.int64) * stride_bs
                )
                bias = tl.load(tile, mask=(rows[:, None] < L) & (cols[None, :] < S), other=0.0)
                s += _log2_units(bias)
            if BIAS >= 4:  # decomposed relative positions: key j on the grid at (j // KW, j % KW)
                grid_h = cols // KW
                inside = (rows[:, None] < L) & (cols[None, :] < S)
                rel_h = tl.load(
                    rh_base
                    + rows[:, None].to(tl.int64) * stride_hl
                    + grid_h[None, :].to(tl.int64) * stride_hk,
                    mask=inside,
                    other=0.0,
                )
                rel_w = tl.load(
                    rw_base
                    + rows[:, None].to(tl.int64) * stride_wl
                    + (cols - grid_h * KW)[None, :].to(tl.int64) * stride_wk,
                    mask=inside,
                    other=0.0,
                )
                s += _log2_units(rel_h + rel_w)
            keep = cols[None, :] < S
            if CAUSAL:
                keep = keep & (cols[None, :] <= rows[:, None]) & (rows[:, None] - cols[None, :] < WINDOW)
            s = tl.where(keep, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # -inf while every key so far is masked (a bias, or a window past a row's first block):
            # subtract 0 there, not -inf (NaN)
            m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.math.exp2(s - m_ref[:, None])
            alpha = tl.math.exp2(m_i - m_ref)
            l_i = l_i * alpha + tl.sum(p, 1)
            v_big, v_small = _parts(
                v_base + cols[:, None].to(tl.int64) * stride_vs + offs_d[None, :] * stride_vd,
                (cols[:, None] < S) & mask_d[None, :],
            )
            p_big = _tf32_round(p)
            acc = acc * alpha[:, None] + _dot3(p_big, _tf32_round(p - p_big), v_big, v_small)
            m_i = m_new
        else:
            skipped = skipped + 1
    return m_i, l_i, acc, skipped


@triton.jit
def attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, bias_ptr, row_ptr, skip_ptr, knorm_ptr, rh_ptr, rw_ptr,
    HQ, GROUP, L, S, D, qk_scale, WINDOW, KW,
    stride_qb, stride_qh, stride_ql, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    stride_bb, stride_bh, stride_bl, stride_bs,
    stride_rb, stride_rh, stride_rs,
    stride_cb, stride_ch, stride_cq, stride_ck,
    stride_hb, stride_hh, stride_hl, stride_hk,
    stride_wb, stride_wh, stride_wl, stride_wk,
    CAUSAL: tl.constexpr, BIAS: tl.constexpr, SKIP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // HQ).to(tl.int64)
    h = (pid_bh % HQ).to(tl.int64)
    kv = h // GROUP
    q_base = q_ptr + b * stride_qb + h * stride_qh
    k_base = k_ptr + b * stride_kb + kv * stride_kh
    v_base = v_ptr + b * stride_vb + kv * stride_vh
    bias_base = bias_ptr + b * stride_bb + h * stride_bh
    row_base = row_ptr + b * stride_rb + h * stride_rh
    skip_base = skip_ptr + b * stride_cb + h * stride_ch
    rh_base = rh_ptr + b * stride_hb + h * stride_hh
    rw_base = rw_ptr + b * stride_wb + h * stride_wh
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    q = tl.load(
        q_base + rows[:, None].to(tl.int64) * stride_ql + offs_d[None, :] * stride_qd,
        mask=(rows[:, None] < L) & mask_d[None, :],
        other=0.0,
    )
    q_big = _tf32_round(q)
    q_small = _tf32_round(q - q_big)
    m_i, l_i, acc, skipped = _sweep(
        q_big, q_small, k_base, v_base, bias_base, row_base, skip_base, rh_base, rw_base, rows, pid_m, L, S,
        qk_scale, WINDOW, KW,
        stride_ks, stride_kd, stride_vs, stride_vd, stride_bl, stride_bs, stride_rs, stride_cq, stride_ck,
        stride_hl, stride_hk, stride_wl, stride_wk,
        CAUSAL, BIAS, SKIP, BLOCK_M, BLOCK_N, BLOCK_D, D,
    )  # fmt: skip
    if SKIP:
        # A skipped score is q.k * scale + a bias of at most SKIP_BELOW, so below
        # |q| max|k| |scale| + SKIP_BELOW: where that is more than 200 (log2 units) under the
        # row's max, exp2 is 0 there in fp32 and the softmax is the one over every key. Else (a
        # row with every key masked, whose equal weights or NaN come from every key; inf or NaN
        # in q or k) the block is swept again without skipping.
        knorm = tl.load(knorm_ptr + b * (HQ // GROUP) + kv)
        reach = tl.sqrt(tl.sum(q * q, 1)) * knorm * tl.abs(qk_scale) * 1.001 + SKIP_BELOW * 1.4426950408889634
        unsafe = tl.sum(tl.where((reach - m_i < -200.0) | (rows >= L), 0, 1), 0)
        if (unsafe > 0) & (skipped > 0):
            m_i, l_i, acc, skipped = _sweep(
                q_big, q_small, k_base, v_base, bias_base, row_base, skip_base, rh_base, rw_base, rows, pid_m,
                L, S, qk_scale, WINDOW, KW,
                stride_ks, stride_kd, stride_vs, stride_vd, stride_bl, stride_bs, stride_rs, stride_cq, stride_ck,
                stride_hl, stride_hk, stride_wl, stride_wk,
                CAUSAL, BIAS, False, BLOCK_M, BLOCK_N, BLOCK_D, D,
            )  # fmt: skip
    out = acc / l_i[:, None]
    o = o_ptr + pid_bh.to(tl.int64) * L * D + rows[:, None].to(tl.int64) * D + offs_d[None, :]
    tl.store(o, out, mask=(rows[:, None] < L) & mask_d[None, :])


def _configs() -> list[triton.Config]:
    # the fastest three at each of ViT-B/16's, GPT-2's and Llama's shapes on the H200
    # (bench/bench_tf32x3_attention.py --sweep, 2026-11-26): K and V split in the kernel
    shapes = [
        (128, 32, 4, 2),
        (128, 32, 4, 3),
        (128, 64, 8, 3),
        (64, 64, 4, 2),
        (128, 128, 8, 2),
        (128, 64, 8, 2),
    ]
    return _tiles(shapes)


def _wide_configs() -> list[triton.Config]:
    # head dims above 128: the (BLOCK_M, D) query parts and (BLOCK_N, D) key parts must fit
    # beside the (BLOCK_M, D) accumulator, so smaller tiles and fewer stages. The fastest three
    # at Gemma 3's shape on the H100 first (0.90, 0.95, 1.10 ms; BLOCK_M 64 with BLOCK_N 64 is
    # out of resources): bench/bench_tf32x3_attention.py --sweep Gemma, 2026-11-27
    shapes = [
        (32, 64, 8, 2),
        (32, 64, 8, 1),
        (32, 32, 4, 1),
        (32, 32, 4, 2),
        (64, 32, 8, 2),
    ]
    return _tiles(shapes)


def _tiles(shapes: list[tuple[int, int, int, int]]) -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s) for m, n, w, s in shapes]


# Autotuned per shape on the GPU; the interpreter (CI) has no benchmarker: one small tile.
_KEY = ["L", "S", "D", "CAUSAL", "BIAS", "SKIP"]
_kernel = Tuned(attention_kernel, _configs(), _KEY, {"BLOCK_M": 16, "BLOCK_N": 16})
_wide_kernel = Tuned(attention_kernel, _wide_configs(), _KEY, {"BLOCK_M": 16, "BLOCK_N": 16})


def _masked_cells(tile: torch.Tensor) -> torch.Tensor:
    """(B, Hq, L, S) bias, any strides -> (B, Hq, ceil(L / CELL), ceil(S / CELL)) int8: 1 where
    every value of the cell is at most SKIP_BELOW (past the ends counts as masked), computed
    once over the dimensions the bias does not broadcast over and expanded as the bias is."""
    cell = CELL.value
    src = tile
    for dim in (0, 1):  # one head (one batch entry) where the bias is the same for all
        if src.stride(dim) == 0:
            src = src.narrow(dim, 0, 1)
    length, keys = src.shape[-2:]
    pad_l, pad_s = -length % cell, -keys % cell
    if pad_l or pad_s:
        src = torch.nn.functional.pad(src, (0, pad_s, 0, pad_l), value=float("-inf"))
    b, h = src.shape[:2]
    peaks = src.reshape(b, h, (length + pad_l) // cell, cell, (keys + pad_s) // cell, cell).amax((3, 5))
    return (peaks <= SKIP_BELOW.value).to(torch.int8).expand(tile.shape[0], tile.shape[1], -1, -1)


def _skip_operands(tile: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The map of the tile's masked cells, and per (batch, key head) the longest key's norm for
    the kernel's bound: inf where a value is not finite (a weight of 0 times inf is NaN in the
    softmax's product, so that block is swept whole)."""
    knorm = torch.linalg.vector_norm(k, dim=-1).amax(-1)
    knorm = torch.where(torch.isfinite(v).flatten(2).all(-1), knorm, float("inf"))
    return _masked_cells(tile), knorm.contiguous()


def _sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    scale: float | None,
    bias: torch.Tensor | None = None,
    window: int = 0,
    key_bias: torch.Tensor | None = None,
    rel_h: torch.Tensor | None = None,
    rel_w: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale + bias + key_bias + rel (+ the causal mask, within ``window`` keys
    when that is > 0)) v for (B, Hq, L, D) q and (B, Hkv, S, D) k, v (or (B, L, D) all three); Hq a
    multiple of Hkv (grouped queries); scale None means 1/sqrt(D), as PyTorch's; ``bias`` and
    ``key_bias`` additive fp32 masks that broadcast to (B, Hq, L, S). One that broadcasts over
    the queries is read as one row for every query, another as a tile: T5's position bias
    (1, H, L, S) and its padding mask (B, 1, 1, S) are read as they are, never added into a
    (B, H, L, S) mask in memory. (Two rows, or two tiles, are added first.) ``rel_h`` (..., L, KH)
    and ``rel_w`` (..., L, KW), both or neither: decomposed relative positions over a KH x KW key
    grid (S = KH KW), rel[i, j] = rel_h[i, j // KW] + rel_w[i, j % KW]."""
    why = unsupported_all(q, k, v, bias, key_bias, rel_h, rel_w)
    if why:  # (a call's host time is what a small attention costs: each check once)
        raise ValueError(f"kforge::tf32x3_sdpa: {why}; call F.scaled_dot_product_attention instead")
    flat = q.dim() == 3
    row, tile, rel = masks(q, k, bias, key_bias, rel_h, rel_w)
    q, k, v = heads(q), heads(k), heads(v)
    batch, hq, length, d = q.shape
    hk, s = k.shape[1], k.shape[2]
    out = torch.empty((batch, hq, length, d), device=q.device, dtype=torch.float32)
    if s == 0:
        out.fill_(float("nan"))  # softmax over no keys, as PyTorch's math path gives
    if out.numel() == 0 or s == 0:
        return out.squeeze(1) if flat else out
    qk_scale = (1.0 / math.sqrt(d) if scale is None else scale) * LOG2E
    # the bits: a row for every query, a tile, the decomposed relative positions
    kind = (row is not None) + 2 * (tile is not None) + 4 * bool(rel)
    tile_strides = (0, 0, 0, 0) if tile is None else tile.stride()
    row_strides = (0, 0, 0) if row is None else (row.stride(0), row.stride(1), row.stride(3))
    empty = q.new_empty(0)
    rh, rw = rel or (empty, empty)
    rel_strides = (*rh.stride(), *rw.stride()) if rel else (0,) * 8
    skip = (
        SKIP_MASKED and tile is not None and row is None and not rel
    )  # a tile alone: nothing lifts a masked cell
    cells, knorm = _skip_operands(tile, k, v) if skip and tile is not None else (empty, empty)
    cell_strides = cells.stride() if skip else (0, 0, 0, 0)
    (_kernel if d <= 128 else _wide_kernel)(
        (length, s, d, bool(is_causal), kind, skip),
        lambda meta: (cdiv(length, meta["BLOCK_M"]), batch * hq),
        q, k, v, out, empty if tile is None else tile, empty if row is None else row, cells, knorm, rh, rw,
        hq, hq // hk, length, s, d, qk_scale, window if window > 0 else length + s, rw.shape[-1] if rel else 1,
        *q.stride(), *k.stride(), *v.stride(), *tile_strides, *row_strides, *cell_strides, *rel_strides,
        CAUSAL=bool(is_causal), BIAS=kind, SKIP=skip, BLOCK_D=max(16, next_power_of_2(d)),
    )  # fmt: skip
    return out.squeeze(1) if flat else out


sdpa_op, sdpa = eager_or_op("kforge::tf32x3_sdpa", _sdpa, lambda q, *_: q.new_empty(q.shape))
