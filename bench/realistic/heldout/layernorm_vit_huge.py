"""ViT-H/14's LayerNorm: batch 32 x 257 tokens of width 1280, eps 1e-6, learnt scale and shift."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden: int = 1280):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-6)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.1)
            self.norm.bias.normal_(0.0, 0.1)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(32, 257, 1280)]


def get_init_inputs():
    return []
