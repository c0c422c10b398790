"""Torch-only candidate for gelu_chain: the same chain with two of eager's five temporaries
written in place (``add_``, ``mul_``), so it allocates and streams less memory. Runs
anywhere torch does, a CPU included:

    kforge eval examples/tasks/gelu_chain.py examples/candidates/gelu_chain_torch.py --device cpu
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * self.scale
        h.add_(self.bias)
        y = F.gelu(h)
        return y.mul_(torch.sigmoid(x))
