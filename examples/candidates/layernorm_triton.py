"""LayerNorm over the last dimension in Triton, one program per row.

Three sweeps of the row in BLOCK_SIZE chunks: the mean, then the variance as the mean
of (x - mean)^2 (two-pass, so no cancellation from E[x^2] - E[x]^2), then
y = (x - mean) * rstd * weight + bias. The later sweeps re-read a row that was just
read, so they mostly hit L1/L2.

Memory traffic: one read of x and one write of y from DRAM, plus the (features,) weight
and bias, read by every row from L2. Tails are masked, so any row length works.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    n_cols, eps,
    stride_x_row, stride_y_row,
    BLOCK_SIZE: tl.constexpr,
):
    row = tl.program_id(axis=0).to(tl.int64)
    x_row_ptr = x_ptr + row * stride_x_row
    y_row_ptr = y_ptr + row * stride_y_row
    offs = tl.arange(0, BLOCK_SIZE)

    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        acc += tl.load(x_row_ptr + cols, mask=cols < n_cols, other=0.0)
    mean = tl.sum(acc, axis=0) / n_cols

    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        mask = cols < n_cols
        x = tl.load(x_row_ptr + cols, mask=mask, other=0.0)
        diff = tl.where(mask, x - mean, 0.0)
        acc += diff * diff
    var = tl.sum(acc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)

    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        mask = cols < n_cols
        x = tl.load(x_row_ptr + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0)
        tl.store(y_row_ptr + cols, (x - mean) * rstd * w + b, mask=mask)


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    if x.dtype != torch.float32:
        raise TypeError("layernorm expects an fp32 tensor")
    n_cols = weight.numel()
    if x.shape[-1] != n_cols:
        raise ValueError(f"last dimension {x.shape[-1]} does not match weight size {n_cols}")
    x2 = x.reshape(-1, n_cols).contiguous()
    y = torch.empty_like(x2)
    BLOCK_SIZE = min(triton.next_power_of_2(n_cols), 2048)
    layernorm_kernel[(x2.shape[0],)](
        x2, weight.contiguous(), bias.contiguous(), y,
        n_cols, eps,
        x2.stride(0), y.stride(0),
        BLOCK_SIZE=BLOCK_SIZE, num_warps=8,
    )
    return y.reshape(x.shape)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.ln = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm(x, self.ln.weight, self.ln.bias, self.ln.eps)
