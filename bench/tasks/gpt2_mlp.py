"""GPT-2 small's MLP at 8 x 1024 tokens: Linear 768 -> 3072, tanh GELU, Linear 3072 -> 768,
written with modules as nanoGPT does, in inference (bench_strategies.py: the GELU in the
3xTF32 GEMM's epilogue)."""

import torch
import torch.nn as nn

batch_size, seq_len, n_embd = 8, 1024, 768


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.eval()

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd)]


def get_init_inputs():
    return []
