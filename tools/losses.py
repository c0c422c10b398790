"""Cross-entropy over logits (with label smoothing and an ignored index) in one read of the
logits, in Triton, strict fp32.

PyTorch computes ``F.cross_entropy`` as log_softmax (the logits read, the log-probabilities
written), then the target's term and, with label smoothing, the mean over all classes (the
log-probabilities read twice more). Here one program per row sweeps its logits once, keeping
an online max and sum of exponentials (the log-sum-exp), the sum of the logits and the target's
logit, and writes two numbers per row: nll = lse - x[target] and smooth = C * lse - sum(x),
so that -sum(log p) = smooth. The loss is PyTorch's:
(1 - eps) * nll + eps / C * smooth per row, zero where the target is ``ignore_index``, then
averaged over the rows that are not ignored (``mean``), summed, or left per row (``none``).

kforge's own kernel, tested against float64 and against PyTorch (tests/test_templates.py);
candidates call ``cross_entropy`` (the custom op ``kforge::cross_entropy`` under torch.compile).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import Tuned, eager_or_op

REDUCTIONS = ("none", "mean", "sum")


@triton.jit
def cross_entropy_kernel(
    x_ptr, t_ptr, nll_ptr, smooth_ptr, C, stride_x, ignore_index, BLOCK: tl.constexpr
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * stride_x
    offs = tl.arange(0, BLOCK)
    m = tl.max(tl.full((BLOCK,), float("-inf"), dtype=tl.float32), 0)
    s = tl.sum(tl.zeros((BLOCK,), dtype=tl.float32), 0)
    total = tl.sum(tl.zeros((BLOCK,), dtype=tl.float32), 0)
    for start in range(0, C, BLOCK):
        cols = start + offs
        mask = cols < C
        x = tl.load(base + cols, mask=mask, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(x, 0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), 0)
        total += tl.sum(tl.where(mask, x, 0.0), 0)
        m = m_new
    lse = m + tl.log(s)
    t = tl.load(t_ptr + row)
    valid = t != ignore_index
    x_t = tl.load(base + tl.where(valid & (t >= 0) & (t < C), t, 0))  # never outside the row (PyTorch
    # raises on such a target; the reference does, so such a task never reaches a candidate)
    tl.store(nll_ptr + row, tl.where(valid, lse - x_t, 0.0))
    tl.store(smooth_ptr + row, tl.where(valid, C * lse - total, 0.0))


def _configs() -> list[triton.Config]:
    return [
        triton.Config({"BLOCK": b}, num_warps=w)
        for b, w in ((1024, 4), (2048, 8), (4096, 8), (4096, 16), (8192, 16))
    ]


_kernel = Tuned(cross_entropy_kernel, _configs(), ["C"], {"BLOCK": 64})


def unsupported(logits: torch.Tensor, target: torch.Tensor) -> str:
    """Why the kernel cannot compute this cross-entropy ("" when it can)."""
    if logits.dtype != torch.float32 or logits.dim() != 2:
        return "logits not 2-D fp32 (rows, classes)"
    if target.dtype != torch.int64 or target.shape != logits.shape[:1]:
        return "targets not one int64 class index per row"
    return ""


def _cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, reduction: str, ignore_index: int, label_smoothing: float
) -> torch.Tensor:
    """F.cross_entropy(logits, target, reduction=..., ignore_index=..., label_smoothing=...)
    for 2-D fp32 logits, class-index targets and no class weights."""
    why = unsupported(logits, target)
    if why or reduction not in REDUCTIONS:
        raise ValueError(
            f"kforge::cross_entropy: {why or f'reduction {reduction!r}'}; call F.cross_entropy instead"
        )
    rows, classes = logits.shape
    x = logits if logits.stride(1) == 1 else logits.contiguous()
    nll = torch.empty(rows, device=x.device, dtype=torch.float32)
    smooth = torch.empty_like(nll)
    if rows:
        _kernel(
            classes,
            lambda meta: (rows,),
            x,
            target.contiguous(),
            nll,
            smooth,
            classes,
            x.stride(0),
            ignore_index,
        )
    eps = float(label_smoothing)
    per_row = nll if eps == 0.0 else (1.0 - eps) * nll + (eps / classes) * smooth
    if reduction == "none":
        return per_row
    total = per_row.sum()
    return total if reduction == "sum" else total / (target != ignore_index).sum()


def _cross_entropy_shape(
    logits: torch.Tensor, target: torch.Tensor, reduction: str, ignore_index: int, label_smoothing: float
) -> torch.Tensor:
    return logits.new_empty(logits.shape[:1] if reduction == "none" else ())


cross_entropy_op, cross_entropy = eager_or_op("kforge::cross_entropy", _cross_entropy, _cross_entropy_shape)
