"""Llama-3-8B's attention for one decoding step over a KV cache, in transformers' eager form:
32 query heads, 8 key/value heads repeated to 32 (repeat_kv), head dim 128, one new token per
sequence against 4096 cached positions, batch 16; matmul, scale, softmax in fp32, matmul (an
LLM's memory-bound decode attention)."""

import math

import torch
import torch.nn as nn

BATCH, HEADS, KV_HEADS, DIM, CACHE = 16, 32, 8, 128, 4096


def repeat_kv(x, n_rep):
    batch, kv_heads, length, dim = x.shape
    x = x[:, :, None, :, :].expand(batch, kv_heads, n_rep, length, dim)
    return x.reshape(batch, kv_heads * n_rep, length, dim)


class Model(nn.Module):
    def forward(self, q, k_cache, v_cache):
        k = repeat_kv(k_cache, HEADS // KV_HEADS)
        v = repeat_kv(v_cache, HEADS // KV_HEADS)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(DIM)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(probs, v)


def get_inputs():
    return [
        torch.randn(BATCH, HEADS, 1, DIM),
        torch.randn(BATCH, KV_HEADS, CACHE, DIM),
        torch.randn(BATCH, KV_HEADS, CACHE, DIM),
    ]


def get_init_inputs():
    return []
