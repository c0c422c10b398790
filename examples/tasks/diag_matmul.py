"""diag(A) @ B for a vector A of length N and an (N, M) matrix B.

The algebraic shortcut task: eager PyTorch builds the N x N diagonal matrix and runs a
dense matrix product (2 * N * N * M FLOPs); the same result is a row scaling,
out[i, j] = A[i] * B[i, j], which reads B once and writes the output once.
"""

import torch
import torch.nn as nn

N = 4096
M = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.diag(A) @ B


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return []
