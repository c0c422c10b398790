"""ViT-L/16's MLP block (timm's Mlp): Linear 1024 -> 4096, exact GELU, Linear 4096 -> 1024, on
batch 16 x 197 tokens; dropout off in eval."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, width: int = 1024, hidden: int = 4096):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def get_inputs():
    return [torch.randn(16, 197, 1024)]


def get_init_inputs():
    return []
