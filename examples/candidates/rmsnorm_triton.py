"""RMSNorm in Triton: y = x * rsqrt(mean(x^2) + eps) * weight, one program per row.

Two sweeps of the row in BLOCK_SIZE chunks: the sum of squares, then the scaled write.
The second sweep re-reads a row that was just read, mostly from L1/L2.

Memory traffic: one read of x and one write of y from DRAM (plus the weight vector from
L2), against about five reads and writes of the full tensor for the five eager kernels.
Tails are masked, so any row length works.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(
    x_ptr, w_ptr, y_ptr,
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
        x = tl.load(x_row_ptr + cols, mask=cols < n_cols, other=0.0)
        acc += x * x
    inv_rms = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)

    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        mask = cols < n_cols
        x = tl.load(x_row_ptr + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        tl.store(y_row_ptr + cols, x * inv_rms * w, mask=mask)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if x.dtype != torch.float32:
        raise TypeError("rmsnorm expects an fp32 tensor")
    n_cols = weight.numel()
    if x.shape[-1] != n_cols:
        raise ValueError(f"last dimension {x.shape[-1]} does not match weight size {n_cols}")
    x2 = x.reshape(-1, n_cols).contiguous()
    y = torch.empty_like(x2)
    BLOCK_SIZE = min(triton.next_power_of_2(n_cols), 2048)
    rmsnorm_kernel[(x2.shape[0],)](
        x2, weight.contiguous(), y,
        n_cols, eps,
        x2.stride(0), y.stride(0),
        BLOCK_SIZE=BLOCK_SIZE, num_warps=8,
    )
    return y.reshape(x.shape)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rmsnorm(x, self.weight, self.eps)
