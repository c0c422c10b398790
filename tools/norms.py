"""LayerNorm and RMSNorm over the last dimension, with the residual add before them fused: one
pass over the rows in Triton, strict fp32.

A transformer block boundary reads ``h = x + residual`` and normalises it; eager PyTorch
writes h, reads it back for the statistics and again for the normalisation. Here each
program holds whole rows in registers (width up to MAX_WIDTH): it reads x and the residual
once, writes h only when something else reads it, and writes the normalised row. The
statistics are fp32 and two-step as PyTorch computes them (the mean, then the mean of the
squared deviations; RMSNorm: the mean of the squares), the square root correctly rounded.
Rows per program (one tile) and warps are autotuned per width.

kforge's own kernels, tested against float64 (tests/test_templates.py); candidates call ``norm``
and ``add_norm``: the custom ops ``kforge::norm`` and ``kforge::add_norm`` under torch.compile
(one graph), the kernel launched directly in eager (the op's dispatch cost 28 us a call).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from .launch import Tuned, cdiv, eager_or_op, next_power_of_2

MAX_WIDTH = 16384  # a row held in registers: 64 KB of fp32 over up to 16 warps


@triton.jit
def norm_kernel(
    x_ptr, r_ptr, w_ptr, b_ptr, y_ptr, h_ptr, ROWS, N, eps,
    stride_x, stride_r, stride_y, stride_h,
    HAS_RES: tl.constexpr, STORE_H: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
    RMS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    # BLOCK_M whole rows as one (BLOCK_M, BLOCK_N) tile: one load of all of them in flight (a
    # loop over the rows, one at a time, reached 65-87% of a copy's bandwidth on the H100 at
    # widths 1024-8192; the tile 84-90%: docs/log/2026-11-27-fourth-unseen-set.md)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask_c = cols < N
    mask = (rows[:, None] < ROWS) & mask_c[None, :]
    at = rows.to(tl.int64)[:, None]
    x = tl.load(x_ptr + at * stride_x + cols[None, :], mask=mask, other=0.0)
    if HAS_RES:
        x += tl.load(r_ptr + at * stride_r + cols[None, :], mask=mask, other=0.0)
        if STORE_H:
            tl.store(h_ptr + at * stride_h + cols[None, :], x, mask=mask)
    if RMS:
        y = x / tl.sqrt_rn(tl.sum(x * x, 1) / N + eps)[:, None]
    else:
        centred = tl.where(mask_c[None, :], x - (tl.sum(x, 1) / N)[:, None], 0.0)
        y = centred / tl.sqrt_rn(tl.sum(centred * centred, 1) / N + eps)[:, None]
    if HAS_W:
        y = y * tl.load(w_ptr + cols, mask=mask_c, other=0.0)[None, :]
    if HAS_B:
        y = y + tl.load(b_ptr + cols, mask=mask_c, other=0.0)[None, :]
    tl.store(y_ptr + at * stride_y + cols[None, :], y, mask=mask)


def _configs() -> list[triton.Config]:
    # rows per tile and warps; the fastest at Llama's, GPT-2 medium's and a width of 8192 among
    # them on the H100 (2026-11-27): (1, 2), (2, 8), (8, 16); (1, 8), (2, 8), (4, 4); (1, 32), (2, 4)
    shapes = [(m, w) for m in (1, 2, 4, 8) for w in (2, 4, 8, 16)] + [(1, 32)]
    return [triton.Config({"BLOCK_M": m}, num_warps=w) for m, w in shapes]


PER_THREAD = 128  # values of the tile a thread holds, at most (the row loop held up to 256)


def _fitting(configs: list[triton.Config], args: dict[str, Any], **constexprs: Any) -> list[triton.Config]:
    """The tiles that fit a width: at most PER_THREAD values a thread (8 rows of 16384 over 2
    warps would be 2048 a thread: long to compile, then spilled)."""
    fit = [c for c in configs if c.kwargs["BLOCK_M"] * constexprs["BLOCK_N"] <= PER_THREAD * 32 * c.num_warps]
    return fit or configs[-1:]


_kernel = Tuned(norm_kernel, _configs(), ["N", "HAS_RES", "RMS"], {"BLOCK_M": 2}, prune=_fitting)


def unsupported(x: torch.Tensor, width: int) -> str:
    """Why the kernel cannot normalise x over its last ``width`` elements ("" when it can)."""
    if x.dtype != torch.float32:
        return "not fp32"
    if x.dim() == 0 or x.shape[-1] != width:
        return f"the last dimension is not the normalised width {width}"
    if not 0 < width <= MAX_WIDTH:
        return f"width {width} not in 1..{MAX_WIDTH}"
    return ""


def _rows(t: torch.Tensor) -> torch.Tensor:
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(1) == 1 else t2.contiguous()


def _launch(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
    rms: bool,
    store_h: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    width = x.shape[-1]
    why = unsupported(x, width)
    if why:
        raise ValueError(f"kforge norm: {why}; call the PyTorch norm instead")
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"kforge norm: residual {tuple(residual.shape)} is not x's {tuple(x.shape)}")
    # Contiguous operands (the usual case) go as they are, rows width apart: each view or
    # allocation with keywords costs microseconds of host time, which is what a norm's call is.
    x2 = x if x.is_contiguous() else _rows(x)
    r2 = x2 if residual is None else residual if residual.is_contiguous() else _rows(residual)
    stride_x = width if x2 is x else x2.stride(0)  # dense: rows width apart (size-1 dims aside)
    stride_r = stride_x if residual is None else width if r2 is residual else r2.stride(0)
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    h = torch.empty_like(y) if store_h else y
    rows = x.numel() // width
    if rows == 0:
        return y, h
    w = y if weight is None else weight if weight.is_contiguous() else weight.contiguous()
    b = y if bias is None else bias if bias.is_contiguous() else bias.contiguous()
    has_res, has_w, has_b = residual is not None, weight is not None, bias is not None
    _kernel(
        (width, has_res, store_h, has_w, has_b, rms), lambda meta: (cdiv(rows, meta["BLOCK_M"]),),
        x2, r2, w, b, y, h, rows, width, float(eps), stride_x, stride_r, width, width,
        HAS_RES=has_res, STORE_H=store_h, HAS_W=has_w, HAS_B=has_b, RMS=rms, BLOCK_N=next_power_of_2(width),
    )  # fmt: skip
    return y, h


def _norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None, bias: torch.Tensor | None,
    eps: float, rms: bool,
) -> torch.Tensor:  # fmt: skip
    """LayerNorm (rms False) or RMSNorm (rms True) of x (+ residual) over the last dimension,
    then ``* weight + bias`` (either may be None)."""
    return _launch(x, residual, weight, bias, eps, rms, False)[0]


def _add_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
    eps: float, rms: bool,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(norm(x + residual), x + residual): the block boundary's normalised value and its
    residual stream, from one read of each input."""
    return _launch(x, residual, weight, bias, eps, rms, True)


norm_op, norm = eager_or_op("kforge::norm", _norm, lambda x, *_: torch.empty_like(x))
add_norm_op, add_norm = eager_or_op(
    "kforge::add_norm", _add_norm, lambda x, *_: (torch.empty_like(x), torch.empty_like(x))
)
