"""DCN-V2's cross layer (a recommender's explicit feature crossing): x0 * (W x + b) + x over
8192 samples of width 1024 (full-rank W), three layers stacked."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, width: int = 1024, layers: int = 3):
        super().__init__()
        self.cross = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))

    def forward(self, x0):
        x = x0
        for layer in self.cross:
            x = x0 * layer(x) + x
        return x


def get_inputs():
    return [torch.randn(8192, 1024)]


def get_init_inputs():
    return []
