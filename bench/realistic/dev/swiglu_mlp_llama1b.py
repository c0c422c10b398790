"""Llama 3.2 1B's MLP (SwiGLU): down(silu(gate(x)) * up(x)), width 2048 -> 8192 -> 2048, no
biases, 4 x 512 tokens, in inference."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, hidden: int = 2048, inner: int = 8192):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def get_inputs():
    return [torch.randn(4, 512, 2048)]


def get_init_inputs():
    return []
