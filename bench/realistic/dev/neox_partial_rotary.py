"""GPT-NeoX / Pythia's partial rotary embedding: rotate_half applied to the first 32 of each
head's 128 dims (rotary_pct 0.25), the rest passed through, for queries and keys; 32 heads,
batch 4 x 2048 positions (an LLM block's memory-bound elementwise part)."""

import torch
import torch.nn as nn

HEADS, DIM, ROT, LENGTH = 32, 128, 32, 2048


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, ROT, 2).float() / ROT))
        freqs = torch.outer(torch.arange(LENGTH).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos()[None, None])
        self.register_buffer("sin", emb.sin()[None, None])

    def forward(self, q, k):
        q_rot, q_pass = q[..., :ROT], q[..., ROT:]
        k_rot, k_pass = k[..., :ROT], k[..., ROT:]
        q_rot = q_rot * self.cos + rotate_half(q_rot) * self.sin
        k_rot = k_rot * self.cos + rotate_half(k_rot) * self.sin
        return torch.cat((q_rot, q_pass), dim=-1), torch.cat((k_rot, k_pass), dim=-1)


def get_inputs():
    return [torch.randn(4, HEADS, LENGTH, DIM), torch.randn(4, HEADS, LENGTH, DIM)]


def get_init_inputs():
    return []
