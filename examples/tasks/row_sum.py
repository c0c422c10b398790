"""Sum over dimension 1 of a (batch, dim1, dim2) tensor, keeping the reduced dimension.

A reduction over a strided (non-innermost) axis: reads batch*dim1*dim2 values and
writes batch*dim2. Adjacent outputs are adjacent in memory, so threads that own
neighbouring outputs read coalesced rows.
"""

import torch
import torch.nn as nn

batch_size = 64
dim1 = 1024
dim2 = 1024
reduce_dim = 1


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
