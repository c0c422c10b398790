"""BLOOM-560m's self-attention core in transformers' eager form: ALiBi position bias added
through baddbmm with the 1/sqrt(d) scale, the causal mask filled with the dtype's minimum,
softmax in fp32, then the product with the values; 16 heads of dim 64, batch 4 x 1024 tokens
(an LLM attention without rotary embeddings)."""

import math

import torch
import torch.nn as nn

BATCH, HEADS, DIM, LENGTH = 4, 16, 64, 1024


def alibi_slopes(heads):
    base = 2 ** (-(2 ** -(math.log2(heads) - 3)))
    return torch.tensor([base ** (i + 1) for i in range(heads)])


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        positions = torch.arange(LENGTH).float()
        alibi = alibi_slopes(HEADS)[:, None, None] * positions[None, None, :]
        self.register_buffer("alibi", alibi.expand(HEADS, 1, LENGTH).repeat(BATCH, 1, 1))
        causal = torch.triu(torch.ones(LENGTH, LENGTH, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal", causal)

    def forward(self, q, k, v):
        # q, k, v: (batch * heads, length, dim)
        scores = torch.baddbmm(self.alibi, q, k.transpose(1, 2), beta=1.0, alpha=1 / math.sqrt(DIM))
        scores = scores.view(BATCH, HEADS, LENGTH, LENGTH)
        scores = scores.masked_fill(self.causal, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
        return torch.bmm(probs.view(BATCH * HEADS, LENGTH, LENGTH), v)


def get_inputs():
    shape = (BATCH * HEADS, LENGTH, DIM)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return []
