"""RMS normalisation over the last dimension with a learned weight, eps = 1e-6.

y = x / sqrt(mean(x^2) + eps) * weight. Eager PyTorch runs it as five kernels
(pow, mean, add+rsqrt, two multiplies); one fused kernel reads x once and writes y once.
"""

import torch
import torch.nn as nn

batch_size = 4096
hidden_size = 4096


class Model(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inv_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * inv_rms * self.weight


def get_inputs():
    return [torch.randn(batch_size, hidden_size)]


def get_init_inputs():
    return [hidden_size]
