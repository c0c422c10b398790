"""Softmax and log-softmax over the last dimension, with a scale (a temperature) applied
first, in Triton, strict fp32.

Eager PyTorch writes ``x / t`` and reads it back for the softmax: four passes over the
tensor where two would do. Here the scale is applied as the tensor is read.

- **Rows that fit in registers** (up to ROW_MAX columns): one program per row reads it once,
  and writes the result once.
- **Long rows** (a vocabulary of 128k tokens): a row is cut into chunks of CHUNK columns, so
  that a few rows still fill the GPU (64 rows of 128256 are 64 programs for one-program-per-row
  kernels, PyTorch's included, on 132 SMs). One kernel writes each chunk's max and sum of
  exponentials; a second combines the row's chunks (a few numbers) and reads its chunk again to
  write it: three passes over the tensor's bytes instead of eager's four, spread over every SM.

kforge's own kernel, tested against float64 and against PyTorch (tests/test_templates.py);
candidates call ``softmax`` (the custom op ``kforge::softmax`` under torch.compile).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import Direct, cdiv, eager_or_op, next_power_of_2

ROW_MAX = 8192  # the widest row kept whole in one program's registers
CHUNK = 4096  # columns per program on longer rows


@triton.jit
def row_kernel(x_ptr, y_ptr, N, stride_x, stride_y, scale, LOG: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.where(mask, tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0) * scale, float("-inf"))
    shifted = x - tl.max(x, 0)
    e = tl.exp(shifted)
    total = tl.sum(e, 0)
    out = shifted - tl.log(total) if LOG else e / total
    tl.store(y_ptr + row * stride_y + cols, out, mask=mask)


@triton.jit
def chunk_stats_kernel(x_ptr, m_ptr, s_ptr, N, stride_x, CHUNKS, scale, BLOCK: tl.constexpr):
    """Per (row, chunk): the chunk's max and sum of exp(x - max), of the scaled values."""
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N  # the padding is -inf after the scale (a negative scale flips an infinity)
    x = tl.where(mask, tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0) * scale, float("-inf"))
    m = tl.max(x, 0)
    tl.store(m_ptr + row * CHUNKS + chunk, m)
    tl.store(s_ptr + row * CHUNKS + chunk, tl.sum(tl.exp(x - m), 0))


@triton.jit
def chunk_write_kernel(
    x_ptr, y_ptr, m_ptr, s_ptr, N, stride_x, stride_y, CHUNKS, scale,
    LOG: tl.constexpr, BLOCK: tl.constexpr, CHUNKS_P2: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    parts = tl.arange(0, CHUNKS_P2)
    have = parts < CHUNKS
    ms = tl.load(m_ptr + row * CHUNKS + parts, mask=have, other=float("-inf"))
    ss = tl.load(s_ptr + row * CHUNKS + parts, mask=have, other=0.0)
    m = tl.max(ms, 0)
    total = tl.sum(tl.where(have, ss * tl.exp(ms - m), 0.0), 0)
    cols = chunk * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    shifted = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0) * scale - m
    out = shifted - tl.log(total) if LOG else tl.exp(shifted) / total
    tl.store(y_ptr + row * stride_y + cols, out, mask=mask)


def _warps(block: int) -> int:
    return 4 if block <= 1024 else 8 if block <= 4096 else 16


_row, _stats, _write = Direct(row_kernel), Direct(chunk_stats_kernel), Direct(chunk_write_kernel)


def _softmax(x: torch.Tensor, scale: float, log: bool) -> torch.Tensor:
    """(log_)softmax(x * scale, dim=-1) for an fp32 tensor."""
    if x.dtype != torch.float32 or x.dim() == 0:
        raise ValueError(
            "kforge::softmax: an fp32 tensor of at least one dimension; call torch.softmax instead"
        )
    width = x.shape[-1]
    x2 = x.reshape(-1, width) if width else x.reshape(-1, 1)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    rows = x2.shape[0]
    y = torch.empty((rows, width), device=x.device, dtype=torch.float32)
    if rows == 0 or width == 0:
        return y.reshape(x.shape)
    if width <= ROW_MAX:
        block = next_power_of_2(width)
        _row(
            (rows,),
            x2,
            y,
            width,
            x2.stride(0),
            y.stride(0),
            float(scale),
            LOG=log,
            BLOCK=block,
            num_warps=_warps(block),
        )
        return y.reshape(x.shape)
    chunks = cdiv(width, CHUNK)
    maxes = torch.empty((rows, chunks), device=x.device, dtype=torch.float32)
    sums = torch.empty_like(maxes)
    warps = _warps(CHUNK)
    _stats((rows, chunks),
        x2, maxes, sums, width, x2.stride(0), chunks, float(scale), BLOCK=CHUNK, num_warps=warps,
    )  # fmt: skip
    _write((rows, chunks),
        x2, y, maxes, sums, width, x2.stride(0), y.stride(0), chunks, float(scale),
        LOG=log, BLOCK=CHUNK, CHUNKS_P2=next_power_of_2(chunks), num_warps=warps,
    )  # fmt: skip
    return y.reshape(x.shape)


def _softmax_shape(x: torch.Tensor, scale: float, log: bool) -> torch.Tensor:
    return x.new_empty(x.shape)


softmax_op, _call = eager_or_op("kforge::softmax", _softmax, _softmax_shape)


def softmax(x: torch.Tensor, scale: float = 1.0, log: bool = False) -> torch.Tensor:
    """``torch.softmax(x * scale, -1)``, or ``torch.log_softmax`` with ``log``, for fp32 x."""
    return _call(x, float(scale), bool(log))
