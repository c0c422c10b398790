"""Gemma 3 1B's local (sliding-window) self-attention layer in transformers' eager form
(Gemma3Attention with eager_attention_forward): hidden 1152 projected to 4 query heads and 1
key/value head of dim 256, per-head Gemma RMSNorm on q and k (x * rsqrt(mean x^2 + eps) *
(1 + w) in float), rotary embedding with the local base 10000 computed from the positions in the
forward, the key/value head repeated 4 times (repeat_kv), scores scaled by
query_pre_attn_scalar^-0.5 = 256^-0.5, an additive sliding-window causal mask (a query sees the
last 512 keys, Gemma 3 1B's sliding_window) built from aranges, float softmax, the weighted sum
of values and o_proj 1024 -> 1152; a prefill of batch 2 x 2048 tokens (an LLM attention block
with a banded mask)."""

import torch
import torch.nn as nn

HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 1152, 4, 1, 256
SLIDING_WINDOW, ROPE_BASE, EPS = 512, 10000.0, 1e-6
BATCH, LENGTH = 2, 2048


class Gemma3RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(dim) * 0.1)  # trained offsets around Gemma's zero init

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_key_value_groups = HEADS // KV_HEADS
        self.scaling = 256**-0.5  # query_pre_attn_scalar
        self.sliding_window = SLIDING_WINDOW
        self.q_proj = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
        self.q_norm = Gemma3RMSNorm(HEAD_DIM, EPS)
        self.k_norm = Gemma3RMSNorm(HEAD_DIM, EPS)
        inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.int64).float() / HEAD_DIM))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def rotary(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def sliding_causal_mask(self, length, device, dtype):
        q_idx = torch.arange(length, device=device)[:, None]
        kv_idx = torch.arange(length, device=device)[None, :]
        allowed = (kv_idx <= q_idx) & (kv_idx > q_idx - self.sliding_window)
        mask = torch.zeros(length, length, device=device, dtype=dtype)
        return mask.masked_fill(~allowed, torch.finfo(dtype).min)[None, None, :, :]

    def forward(self, hidden_states):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, HEAD_DIM)
        position_ids = torch.arange(input_shape[1], device=hidden_states.device)[None, :].expand(
            input_shape[0], -1
        )
        cos, sin = self.rotary(hidden_states, position_ids)
        attention_mask = self.sliding_causal_mask(input_shape[1], hidden_states.device, hidden_states.dtype)

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        query_states = self.q_norm(query_states)
        key_states = self.k_norm(key_states)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        # eager_attention_forward
        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.scaling
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()

        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output)


def get_inputs():
    return [torch.randn(BATCH, LENGTH, HIDDEN)]


def get_init_inputs():
    return []
