"""GPT-2 small's MLP (transformers' GPT2MLP): Conv1D 768 -> 3072 (an addmm with a transposed
weight), gelu_new (the tanh approximation written out), Conv1D 3072 -> 768; dropout off in
eval; batch 8 x 1024 tokens (an LLM block's GEMMs)."""

import math

import torch
import torch.nn as nn

WIDTH, TOKENS = 768, 8 * 1024


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        out = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return out.view(x.size()[:-1] + (self.nf,))


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = Conv1D(4 * WIDTH, WIDTH)
        self.c_proj = Conv1D(WIDTH, 4 * WIDTH)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


def get_inputs():
    return [torch.randn(8, 1024, WIDTH)]


def get_init_inputs():
    return []
