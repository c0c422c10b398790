"""Swin-T's patch merging after stage 1 (the reference implementation's PatchMerging): the four
pixels of each 2 x 2 window concatenated over channels (96 -> 384), LayerNorm, Linear 384 -> 192
without bias; batch 32 at 56 x 56 tokens (vision, strided gathers before a GEMM)."""

import torch
import torch.nn as nn

SIDE, DIM = 56, 96


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(4 * DIM)
        self.reduction = nn.Linear(4 * DIM, 2 * DIM, bias=False)

    def forward(self, x):
        batch = x.shape[0]
        x = x.view(batch, SIDE, SIDE, DIM)
        x0 = x[:, 0::2, 0::2, :]
        x1 = x[:, 1::2, 0::2, :]
        x2 = x[:, 0::2, 1::2, :]
        x3 = x[:, 1::2, 1::2, :]
        x = torch.cat([x0, x1, x2, x3], -1).view(batch, -1, 4 * DIM)
        return self.reduction(self.norm(x))


def get_inputs():
    return [torch.randn(32, SIDE * SIDE, DIM)]


def get_init_inputs():
    return []
