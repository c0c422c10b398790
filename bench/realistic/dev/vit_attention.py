"""ViT-B/16's attention block as timm writes it (fused qkv Linear, 12 heads of 64,
scaled_dot_product_attention, output projection): batch 32 x 197 tokens of width 768."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim: int = 768, heads: int = 12):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


def get_inputs():
    return [torch.randn(32, 197, 768)]


def get_init_inputs():
    return []
