"""Launch-bound: 20 tiny elementwise ops on a 512-vector (bench_fidelity.py --launch-bound)."""

import torch
import torch.nn as nn

N = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        for _ in range(10):
            x = x * 1.01
            x = x + 0.5
        return x


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
