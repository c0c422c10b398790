"""Scaled dot-product attention, softmax(Q K^T / sqrt(d)) V, without masking.

Eager PyTorch writes the (batch, heads, seq, seq) score and probability matrices to
memory; a flash-attention kernel keeps them on chip with an online softmax and only
reads Q, K, V and writes the output.
"""

import math

import torch
import torch.nn as nn

batch_size = 4
num_heads = 8
seq_len = 1024
head_dim = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        probs = torch.softmax(scores, dim=-1)
        return torch.matmul(probs, v)


def get_inputs():
    shape = (batch_size, num_heads, seq_len, head_dim)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return []
