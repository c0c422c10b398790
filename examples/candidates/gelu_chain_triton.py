"""y = gelu(x * scale + bias) * sigmoid(x), fused into one Triton elementwise kernel.

GELU is the exact form, 0.5 * v * (1 + erf(v / sqrt(2))), as torch.nn.functional.gelu
computes by default. The input is viewed as (rows, features); a 1D grid of programs
each handles BLOCK_SIZE consecutive elements, and the bias element is bias[i % features].

Memory traffic: one read of x and one write of y (plus the bias vector from L2), against
about five reads and five writes of the full tensor in eager PyTorch. The tail is masked.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_chain_kernel(
    x_ptr, bias_ptr, y_ptr,
    n_elements, n_features, scale,
    BLOCK_SIZE: tl.constexpr,
):
    pid = tl.program_id(axis=0).to(tl.int64)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(bias_ptr + offs % n_features, mask=mask, other=0.0)
    v = x * scale + b
    gelu = 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476))
    sig = 1.0 / (1.0 + tl.exp(-x))
    tl.store(y_ptr + offs, gelu * sig, mask=mask)


def gelu_chain(x: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    if x.dtype != torch.float32:
        raise TypeError("gelu_chain expects an fp32 tensor")
    if x.shape[-1] != bias.numel():
        raise ValueError(f"last dimension {x.shape[-1]} does not match bias size {bias.numel()}")
    x = x.contiguous()
    y = torch.empty_like(x)
    n_elements = x.numel()
    BLOCK_SIZE = 1024
    grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
    gelu_chain_kernel[grid](
        x, bias.contiguous(), y, n_elements, bias.numel(), float(scale), BLOCK_SIZE=BLOCK_SIZE, num_warps=4
    )
    return y


class ModelNew(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu_chain(x, self.bias, self.scale)
