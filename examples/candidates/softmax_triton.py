"""Row softmax in Triton with an online (running max, running sum) first pass.

One program per row. Pass 1 sweeps the row in BLOCK_SIZE chunks keeping, per lane, the
largest value seen and the sum of exp(x - max) rescaled whenever the max grows; the lanes
are then combined into the row's max m and normaliser s. Pass 2 sweeps again and writes
exp(x - m) / s.

Memory traffic: reads the matrix twice (the second read of a 32 KB row mostly hits L2)
and writes it once; eager PyTorch does about the same, so the gain here is small and
comes from the single launch and full-width loads. Masked lanes load -inf, which
contributes exp(-inf) = 0, so any row length works.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(
    x_ptr, y_ptr,
    n_cols,
    stride_x_row, stride_y_row,
    BLOCK_SIZE: tl.constexpr,
):
    row = tl.program_id(axis=0).to(tl.int64)
    x_row_ptr = x_ptr + row * stride_x_row
    y_row_ptr = y_ptr + row * stride_y_row
    offs = tl.arange(0, BLOCK_SIZE)

    # Pass 1: per-lane running max and rescaled running sum.
    m_lane = tl.full((BLOCK_SIZE,), float("-inf"), dtype=tl.float32)
    s_lane = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        x = tl.load(x_row_ptr + cols, mask=cols < n_cols, other=float("-inf"))
        m_new = tl.maximum(m_lane, x)
        # A lane that has only seen -inf (masked tail) keeps m = -inf and s = 0;
        # guard it so that exp(-inf - -inf) = NaN never appears.
        seen = m_new != float("-inf")
        alpha = tl.where(seen, tl.exp(m_lane - m_new), 0.0)
        p = tl.where(seen, tl.exp(x - m_new), 0.0)
        s_lane = s_lane * alpha + p
        m_lane = m_new
    m = tl.max(m_lane, axis=0)
    s = tl.sum(s_lane * tl.exp(m_lane - m), axis=0)
    inv_s = 1.0 / s

    # Pass 2: normalise and write.
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        mask = cols < n_cols
        x = tl.load(x_row_ptr + cols, mask=mask, other=float("-inf"))
        tl.store(y_row_ptr + cols, tl.exp(x - m) * inv_s, mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    if x.dtype != torch.float32:
        raise TypeError("softmax expects an fp32 tensor")
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2)
    BLOCK_SIZE = min(triton.next_power_of_2(n_cols), 2048)
    num_warps = 8 if BLOCK_SIZE >= 2048 else 4
    softmax_kernel[(n_rows,)](
        x2, y, n_cols, x2.stride(0), y.stride(0), BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps
    )
    return y.reshape(x.shape)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax(x)
