"""Mean cross-entropy of (batch, classes) logits and int64 targets, in two Triton kernels.

Kernel 1, one program per row: a single sweep in BLOCK_SIZE chunks keeps per-lane
running (max, sum of exp(x - max)) pairs, combines them into the row's log-sum-exp, and
stores loss[row] = logsumexp(row) - row[target[row]]. Kernel 2, one program: sums the
batch losses in a fixed order and divides by the batch size (deterministic, no atomics).

Memory traffic: one read of the logits (batch * classes), batch int64 targets, and a
batch-sized float buffer written and read once. Targets must lie in [0, classes), as
get_inputs() makes them; ignore_index and label smoothing are not handled, and an
out-of-range target gives NaN rather than reading out of bounds.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cross_entropy_rows_kernel(
    logits_ptr, targets_ptr, losses_ptr,
    n_classes,
    stride_row,
    BLOCK_SIZE: tl.constexpr,
):
    row = tl.program_id(axis=0).to(tl.int64)
    row_ptr = logits_ptr + row * stride_row
    offs = tl.arange(0, BLOCK_SIZE)

    m_lane = tl.full((BLOCK_SIZE,), float("-inf"), dtype=tl.float32)
    s_lane = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for start in range(0, n_classes, BLOCK_SIZE):
        cols = start + offs
        x = tl.load(row_ptr + cols, mask=cols < n_classes, other=float("-inf"))
        m_new = tl.maximum(m_lane, x)
        seen = m_new != float("-inf")
        alpha = tl.where(seen, tl.exp(m_lane - m_new), 0.0)
        p = tl.where(seen, tl.exp(x - m_new), 0.0)
        s_lane = s_lane * alpha + p
        m_lane = m_new
    m = tl.max(m_lane, axis=0)
    s = tl.sum(s_lane * tl.exp(m_lane - m), axis=0)
    logsumexp = m + tl.log(s)

    target = tl.load(targets_ptr + row)
    valid = (target >= 0) & (target < n_classes)
    safe_target = tl.where(valid, target, 0)
    target_logit = tl.load(row_ptr + safe_target)
    loss = tl.where(valid, logsumexp - target_logit, float("nan"))
    tl.store(losses_ptr + row, loss)


@triton.jit
def mean_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for start in range(0, n, BLOCK_SIZE):
        idx = start + offs
        acc += tl.load(x_ptr + idx, mask=idx < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / n)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    if logits.dtype != torch.float32 or targets.dtype != torch.int64:
        raise TypeError("cross_entropy expects fp32 logits and int64 targets")
    if logits.dim() != 2 or targets.shape != (logits.shape[0],):
        raise ValueError(f"expected (B, C) logits and (B,) targets, got {tuple(logits.shape)}, {tuple(targets.shape)}")
    logits = logits.contiguous()
    targets = targets.contiguous()
    n_rows, n_classes = logits.shape
    losses = torch.empty(n_rows, device=logits.device, dtype=torch.float32)
    out = torch.empty((), device=logits.device, dtype=torch.float32)
    BLOCK_SIZE = min(triton.next_power_of_2(n_classes), 2048)
    cross_entropy_rows_kernel[(n_rows,)](
        logits, targets, losses, n_classes, logits.stride(0), BLOCK_SIZE=BLOCK_SIZE, num_warps=8
    )
    mean_kernel[(1,)](losses, out, n_rows, BLOCK_SIZE=1024, num_warps=4)
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return cross_entropy(predictions, targets)
