"""Sum over one dimension (keepdim) in Triton, for any tensor and any reduced dimension.

The input is viewed as (outer, R, inner): R is the reduced dimension, outer the product
of the dimensions before it, inner of those after. Program (o, j) owns BLOCK_INNER
adjacent outputs out[o, 0, j*BLOCK_INNER : (j+1)*BLOCK_INNER] and sweeps R in
BLOCK_R-row chunks: each chunk is a (BLOCK_R, BLOCK_INNER) tile whose rows are
contiguous in memory, so loads are coalesced; the tile is summed over its rows.

Memory traffic: reads the input once and writes outer * inner values. When the reduced
dimension is the last one (inner = 1) the same kernel is correct but its loads are
strided; that case is not the task's.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_middle_kernel(
    x_ptr, y_ptr,
    R, inner,
    stride_x_outer, stride_x_r,
    stride_y_outer,
    BLOCK_R: tl.constexpr, BLOCK_INNER: tl.constexpr,
):
    pid_outer = tl.program_id(axis=0).to(tl.int64)
    pid_inner = tl.program_id(axis=1)
    offs_inner = pid_inner * BLOCK_INNER + tl.arange(0, BLOCK_INNER)
    offs_r = tl.arange(0, BLOCK_R)
    mask_inner = offs_inner < inner
    base_ptr = x_ptr + pid_outer * stride_x_outer

    acc = tl.zeros((BLOCK_R, BLOCK_INNER), dtype=tl.float32)
    for r0 in range(0, R, BLOCK_R):
        rows = r0 + offs_r
        ptrs = base_ptr + rows[:, None].to(tl.int64) * stride_x_r + offs_inner[None, :]
        acc += tl.load(ptrs, mask=(rows[:, None] < R) & mask_inner[None, :], other=0.0)
    total = tl.sum(acc, axis=0)
    tl.store(y_ptr + pid_outer * stride_y_outer + offs_inner, total, mask=mask_inner)


def sum_keepdim(x: torch.Tensor, dim: int) -> torch.Tensor:
    if x.dtype != torch.float32:
        raise TypeError("sum_keepdim expects an fp32 tensor")
    dim = dim % x.dim()
    shape = list(x.shape)
    outer = 1
    for size in shape[:dim]:
        outer *= size
    inner = 1
    for size in shape[dim + 1 :]:
        inner *= size
    R = shape[dim]
    x3 = x.contiguous().reshape(outer, R, inner)
    out_shape = shape[:dim] + [1] + shape[dim + 1 :]
    y = torch.empty((outer, inner), device=x.device, dtype=torch.float32)
    BLOCK_INNER = min(triton.next_power_of_2(inner), 128)
    BLOCK_R = 32
    grid = (outer, triton.cdiv(inner, BLOCK_INNER))
    sum_middle_kernel[grid](
        x3, y,
        R, inner,
        x3.stride(0), x3.stride(1),
        y.stride(0),
        BLOCK_R=BLOCK_R, BLOCK_INNER=BLOCK_INNER, num_warps=4,
    )
    return y.reshape(out_shape)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum_keepdim(x, self.dim)
