"""BERT-large's feed-forward and output block in inference: Linear 1024 -> 4096, GELU (erf),
Linear 4096 -> 1024, residual add, LayerNorm (eps 1e-12); batch 16 x 512 tokens."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden: int = 1024, inner: int = 4096):
        super().__init__()
        self.intermediate = nn.Linear(hidden, inner)
        self.act = nn.GELU()
        self.output = nn.Linear(inner, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.eval()

    def forward(self, x):
        return self.norm(self.output(self.act(self.intermediate(x))) + x)


def get_inputs():
    return [torch.randn(16, 512, 1024)]


def get_init_inputs():
    return []
