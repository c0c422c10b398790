"""Swin-T's window attention written out by hand: 7 x 7 windows (49 tokens), 3 heads of 32,
a learnt relative-position bias added to the scores before the softmax; batch 32 at 56 x 56
(2048 windows)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, heads: int = 3, window: int = 49):
        super().__init__()
        self.scale = 32**-0.5
        self.bias = nn.Parameter(0.02 * torch.randn(heads, window, window))

    def forward(self, q, k, v):
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = attn + self.bias.unsqueeze(0)
        return attn.softmax(dim=-1) @ v


def get_inputs():
    return [torch.randn(2048, 3, 49, 32) for _ in range(3)]


def get_init_inputs():
    return []
