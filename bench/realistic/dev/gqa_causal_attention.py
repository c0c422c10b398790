"""Grouped-query causal attention with Llama 3.2 1B's heads (32 query heads sharing 8 key and
value heads, head dim 64), batch 4 x 1024 positions, through scaled_dot_product_attention with
enable_gqa, as transformers calls it."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.125, enable_gqa=True)


def get_inputs():
    return [torch.randn(4, 32, 1024, 64), torch.randn(4, 8, 1024, 64), torch.randn(4, 8, 1024, 64)]


def get_init_inputs():
    return []
