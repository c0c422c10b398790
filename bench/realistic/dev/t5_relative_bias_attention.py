"""T5-base's encoder self-attention sub-layer with its relative-position bias (transformers'
T5LayerSelfAttention of the first encoder layer, the one that owns the bias table): T5LayerNorm
(RMS, no mean, no bias) over d_model 768, q/k/v projections to 12 heads of 64 without bias,
unscaled q.k^T scores plus the bidirectional bucketed relative-position bias (32 buckets,
max distance 128, log-spaced buckets computed from the positions in the forward) plus the
padding mask made from the int64 attention_mask, softmax, the weighted sum of values, the output
projection and the residual add; batch 8 x 512 tokens (T5's input length), each sequence padded
after 256 to 512 real tokens (an NLP encoder's attention)."""

import math

import torch
import torch.nn as nn

D_MODEL, HEADS, D_KV, BUCKETS, MAX_DISTANCE = 768, 12, 64, 32, 128
BATCH, LENGTH = 8, 512


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


class T5Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.is_decoder = False
        self.relative_attention_num_buckets = BUCKETS
        self.relative_attention_max_distance = MAX_DISTANCE
        self.n_heads = HEADS
        self.key_value_proj_dim = D_KV
        self.inner_dim = HEADS * D_KV
        self.q = nn.Linear(D_MODEL, self.inner_dim, bias=False)
        self.k = nn.Linear(D_MODEL, self.inner_dim, bias=False)
        self.v = nn.Linear(D_MODEL, self.inner_dim, bias=False)
        self.o = nn.Linear(self.inner_dim, D_MODEL, bias=False)
        self.relative_attention_bias = nn.Embedding(BUCKETS, HEADS)

    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
        )
        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets

    def compute_bias(self, query_length, key_length, device):
        context_position = torch.arange(query_length, dtype=torch.long, device=device)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        relative_position = memory_position - context_position  # (query_length, key_length)
        relative_position_bucket = self._relative_position_bucket(
            relative_position,
            bidirectional=(not self.is_decoder),
            num_buckets=self.relative_attention_num_buckets,
            max_distance=self.relative_attention_max_distance,
        )
        values = self.relative_attention_bias(relative_position_bucket)  # (q, k, heads)
        return values.permute([2, 0, 1]).unsqueeze(0)  # (1, heads, q, k)

    def forward(self, hidden_states, mask):
        batch_size, seq_length = hidden_states.shape[:2]
        shape = (batch_size, -1, self.n_heads, self.key_value_proj_dim)
        query_states = self.q(hidden_states).view(shape).transpose(1, 2)
        key_states = self.k(hidden_states).view(shape).transpose(1, 2)
        value_states = self.v(hidden_states).view(shape).transpose(1, 2)

        scores = torch.matmul(query_states, key_states.transpose(3, 2))
        position_bias = self.compute_bias(seq_length, seq_length, device=scores.device)
        position_bias = position_bias + mask
        scores += position_bias
        attn_weights = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous().view(batch_size, -1, self.inner_dim)
        return self.o(attn_output)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.SelfAttention = T5Attention()
        self.layer_norm = T5LayerNorm(D_MODEL)

    def forward(self, hidden_states, attention_mask):
        # the encoder's extended attention mask: 0 where attended, the dtype's minimum where padded
        dtype = hidden_states.dtype
        extended = attention_mask[:, None, None, :].to(dtype)
        extended = (1.0 - extended) * torch.finfo(dtype).min
        normed_hidden_states = self.layer_norm(hidden_states)
        attention_output = self.SelfAttention(normed_hidden_states, extended)
        return hidden_states + attention_output


def get_inputs():
    lengths = torch.randint(256, LENGTH + 1, (BATCH,))
    attention_mask = (torch.arange(LENGTH)[None, :] < lengths[:, None]).long()
    return [torch.randn(BATCH, LENGTH, D_MODEL), attention_mask]


def get_init_inputs():
    return []
