"""Qwen2-7B's attention as transformers' "eager" implementation writes it (no SDPA): 28 query
heads sharing 4 key and value heads of head dim 128, the key and value heads repeated by
repeat_kv (expand + reshape), scores scaled, a causal additive mask, softmax in fp32, then the
values; batch 2 x 1024 positions."""

import torch
import torch.nn as nn

HEADS, KV_HEADS, DIM, LENGTH = 28, 4, 128, 1024


def repeat_kv(x, groups):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, groups, s, d).reshape(b, h * groups, s, d)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        mask = torch.full((LENGTH, LENGTH), float("-inf")).triu(1)
        self.register_buffer("mask", mask[None, None])

    def forward(self, q, k, v):
        k = repeat_kv(k, HEADS // KV_HEADS)
        v = repeat_kv(v, HEADS // KV_HEADS)
        scores = torch.matmul(q, k.transpose(2, 3)) / DIM**0.5
        scores = scores + self.mask[:, :, : q.shape[2], : k.shape[2]]
        probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32)
        return torch.matmul(probs, v)


def get_inputs():
    return [
        torch.randn(2, HEADS, LENGTH, DIM),
        torch.randn(2, KV_HEADS, LENGTH, DIM),
        torch.randn(2, KV_HEADS, LENGTH, DIM),
    ]


def get_init_inputs():
    return []
