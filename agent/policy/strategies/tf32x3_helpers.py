"""What the 3xTF32 families' candidates call: the prelude's helpers (``HELPERS``, around the
prior kernel ``matmul_tf32x3_triton.py``) and, under the same names, what each call computes in
PyTorch, which shape propagation runs on meta tensors after the pass (:mod:`.tf32x3`)."""

from __future__ import annotations

import torch

from . import fx_rewrite

HELPERS = '''
def _kforge_mm3(a, b, bias=None, act=None):
    """act(a @ b (+ bias)) with the 3xTF32 kernel: 2-D @ 2-D, 3-D @ 3-D, or N-D @ 2-D."""
    if a.dim() == b.dim() and a.dim() in (2, 3):
        return matmul_tf32x3(a, b, bias, act=act)
    out = matmul_tf32x3(a.reshape(-1, a.shape[-1]), b, bias, act=act)
    return out.reshape(*a.shape[:-1], b.shape[-1])


def _kforge_linear3(x, weight, bias=None, act=None):
    return linear_tf32x3(x, weight, bias, act)


def _kforge_sdpa3(q, k, v, is_causal=False, scale=None, bias=None, window=0, key_bias=None, rel_h=None, rel_w=None):
    return attention_tf32x3(q, k, v, is_causal, scale, bias, window, key_bias, rel_h, rel_w)
'''


def _kforge_mm3(
    a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, act: str | None = None
) -> torch.Tensor:
    """What the emitted call computes (shape propagation runs it on meta tensors)."""
    out = torch.matmul(a, b)
    return fx_rewrite.activate(out if bias is None else out + bias, act)


def _kforge_linear3(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, act: str | None = None
) -> torch.Tensor:
    return fx_rewrite.activate(torch.nn.functional.linear(x, weight, bias), act)


def _kforge_sdpa3(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
    bias: torch.Tensor | None = None,
    window: int = 0,
    key_bias: torch.Tensor | None = None,
    rel_h: torch.Tensor | None = None,
    rel_w: torch.Tensor | None = None,
) -> torch.Tensor:
    """What the emitted call computes; shape propagation runs it on meta tensors."""
    enable_gqa = q.dim() == 4 and k.dim() == 4 and q.shape[1] != k.shape[1]
    if rel_h is not None and rel_w is not None:  # decomposed relative positions: their (L, S) sum
        rel = (rel_h.unsqueeze(-1) + rel_w.unsqueeze(-2)).flatten(-2)
        key_bias = rel if key_bias is None else key_bias + rel
    if key_bias is not None:  # the two masks the kernel reads apart: one additive mask
        bias = key_bias if bias is None else bias + key_bias
    if is_causal and (bias is not None or window > 0):  # SDPA takes one mask: they join
        size = (q.shape[-2], k.shape[-2])
        masked = torch.ones(size, dtype=torch.bool, device=q.device).triu(1)
        if window > 0:
            masked |= torch.ones(size, dtype=torch.bool, device=q.device).tril(-window)
        zero = torch.zeros((), device=q.device)
        bias, is_causal = torch.where(masked, float("-inf"), zero if bias is None else bias), False
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=bias, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa
    )
