"""Rotary position embedding on Llama 3 8B's queries and keys (32 query heads, 8 key heads,
head dim 128, 2048 positions, batch 4), in transformers' rotate_half form."""

import torch
import torch.nn as nn


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, cos, sin):
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def get_inputs():
    positions = torch.arange(2048, dtype=torch.float32)
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, 128, 2, dtype=torch.float32) / 128))
    angles = torch.outer(positions, inv_freq)
    emb = torch.cat((angles, angles), dim=-1).expand(4, -1, -1)
    return [torch.randn(4, 32, 2048, 128), torch.randn(4, 8, 2048, 128), emb.cos(), emb.sin()]


def get_init_inputs():
    return []
