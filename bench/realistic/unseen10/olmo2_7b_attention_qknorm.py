"""OLMo-2 7B (AllenAI) -- self-attention sub-block of one decoder layer, with QK-norm and post-norm.

Model / block: OLMo-2-1124-7B decoder layer, attention half:
    q = RMSNorm_q(W_q x), k = RMSNorm_k(W_k x)   (QK-norm over the full projected width 4096, not per head)
    rotary position embedding (rope_theta = 500000, rotate_half convention)
    eager causal softmax attention, 32 heads x 128 (no GQA in the 7B model)
    o_proj, then OLMo-2's *post*-attention RMSNorm and the residual add:
    out = x + RMSNorm_post(o_proj(attn)).
Upstream code followed: HuggingFace transformers models/olmo2/modeling_olmo2.py
(Olmo2RMSNorm, Olmo2RotaryEmbedding, apply_rotary_pos_emb, eager_attention_forward,
Olmo2Attention, the attention part of Olmo2DecoderLayer.forward).
Use case: LLM prefill of a full 4096-token context (OLMo-2's max_position_embeddings).
Shapes: hidden_states [batch=1, seq=4096, hidden=4096] fp32 -> output [1, 4096, 4096].
Rough FLOPs: q/k/v/o projections 4 * 2 * 4096 * 4096^2 = 550 GFLOP, QK^T and PV
2 * 2 * 32 * 4096^2 * 128 = 275 GFLOP (full square, as eager does) -> ~825 GFLOP (~16 ms at 50 TFLOP/s).
Weights: 4 x 4096^2 fp32 = 268 MB.

Departures:
- Only one decoder layer's attention half (attention + post_attention_layernorm + residual); the MLP half is left out.
- Rotary cos/sin and the additive causal mask are built inside forward from arange (in HF they are built once at
  the model level from position_ids / attention_mask); no padding, no KV cache.
- Linear weights use normal(0, 0.02) (HF's initializer_range); RMSNorm weights are 1 + 0.1 * normal noise instead
  of all ones, to look like trained values.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

HIDDEN = 4096
NUM_HEADS = 32
NUM_KV_HEADS = 32
HEAD_DIM = HIDDEN // NUM_HEADS
ROPE_THETA = 500000.0
RMS_EPS = 1e-6
BATCH = 1
SEQ = 4096


class Olmo2RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return (self.weight * hidden_states).to(input_dtype)


class Olmo2RotaryEmbedding(nn.Module):
    def __init__(self, dim, base):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = (
            self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        )
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


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


def eager_attention_forward(query, key, value, attention_mask, scaling, num_key_value_groups):
    key_states = repeat_kv(key, num_key_value_groups)
    value_states = repeat_kv(value, num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class Olmo2Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = HEAD_DIM
        self.num_key_value_groups = NUM_HEADS // NUM_KV_HEADS
        self.scaling = self.head_dim**-0.5
        self.q_proj = nn.Linear(HIDDEN, NUM_HEADS * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(HIDDEN, NUM_KV_HEADS * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(HIDDEN, NUM_KV_HEADS * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(NUM_HEADS * HEAD_DIM, HIDDEN, bias=False)
        self.q_norm = Olmo2RMSNorm(NUM_HEADS * HEAD_DIM, RMS_EPS)
        self.k_norm = Olmo2RMSNorm(NUM_KV_HEADS * HEAD_DIM, RMS_EPS)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_norm(self.q_proj(hidden_states))
        key_states = self.k_norm(self.k_proj(hidden_states))
        value_states = self.v_proj(hidden_states)

        query_states = query_states.view(hidden_shape).transpose(1, 2)
        key_states = key_states.view(hidden_shape).transpose(1, 2)
        value_states = value_states.view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        attn_output, _ = eager_attention_forward(
            query_states, key_states, value_states, attention_mask, self.scaling, self.num_key_value_groups
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = Olmo2Attention()
        self.post_attention_layernorm = Olmo2RMSNorm(HIDDEN, RMS_EPS)
        self.rotary_emb = Olmo2RotaryEmbedding(HEAD_DIM, ROPE_THETA)
        with torch.no_grad():
            for lin in (
                self.self_attn.q_proj,
                self.self_attn.k_proj,
                self.self_attn.v_proj,
                self.self_attn.o_proj,
            ):
                lin.weight.normal_(0.0, 0.02)
            for norm in (self.self_attn.q_norm, self.self_attn.k_norm, self.post_attention_layernorm):
                norm.weight.copy_(1.0 + 0.1 * torch.randn_like(norm.weight))
        self.eval()

    def forward(self, hidden_states):
        bsz, seq_len, _ = hidden_states.shape
        position_ids = torch.arange(seq_len, device=hidden_states.device).unsqueeze(0).expand(bsz, -1)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        min_val = torch.finfo(hidden_states.dtype).min
        causal_mask = torch.full(
            (seq_len, seq_len), min_val, dtype=hidden_states.dtype, device=hidden_states.device
        ).triu(1)[None, None]

        residual = hidden_states
        hidden_states = self.self_attn(hidden_states, position_embeddings, causal_mask)
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN, dtype=torch.float32)]


def get_init_inputs():
    return []
