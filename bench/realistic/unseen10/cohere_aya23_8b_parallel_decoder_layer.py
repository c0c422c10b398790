"""Cohere Command-R family (Aya-23-8B config) -- one full *parallel* decoder layer.

Model / block: CohereDecoderLayer as used by Command-R / Aya-23. Unlike sequential pre-norm blocks, Cohere
runs attention and MLP in parallel off one shared norm:
    h = CohereLayerNorm(x)                  (mean-centred LayerNorm, weight only, no bias, eps 1e-5)
    out = x + Attn(h) + MLP(h)
Attention: q/k/v/o without bias, 32 query heads, 8 KV heads (GQA via repeat_kv), head_dim 128, *interleaved*
rotary embedding (repeat_interleave of freqs, rotate_half on even/odd lanes, q/k cast to fp32), eager causal
softmax attention. MLP: SwiGLU, down(silu(gate(h)) * up(h)), intermediate 14336.
Upstream code followed: HuggingFace transformers models/cohere/modeling_cohere.py (CohereLayerNorm,
CohereRotaryEmbedding, rotate_half, apply_rotary_pos_emb, repeat_kv, eager_attention_forward, CohereAttention,
CohereMLP, CohereDecoderLayer). Config: CohereForAI/aya-23-8B (hidden 4096, 32 heads, 8 kv heads,
intermediate 14336, rope_theta 10000, use_qk_norm False).
Use case: LLM prefill of a 2048-token prompt.
Shapes: hidden_states [batch=1, seq=2048, hidden=4096] fp32 -> [1, 2048, 4096].
Rough FLOPs: q,o 2*2*2048*4096^2 = 137 GFLOP; k,v 2*2*2048*4096*1024 = 34 GFLOP; MLP 3*2*2048*4096*14336 = 722 GFLOP;
attention scores + PV 2*2*32*2048^2*128 = 69 GFLOP -> ~962 GFLOP (~19 ms at 50 TFLOP/s).
Weights: 218M params = 0.87 GB fp32.

Departures:
- One decoder layer only; rotary cos/sin and the additive causal mask are built inside forward from arange
  (HF builds them once at model level); no padding mask, no KV cache.
- Linear weights normal(0, 0.02) (HF initializer_range); LayerNorm weight 1 + 0.1 * noise instead of ones.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

HIDDEN = 4096
INTERMEDIATE = 14336
NUM_HEADS = 32
NUM_KV_HEADS = 8
HEAD_DIM = HIDDEN // NUM_HEADS
ROPE_THETA = 10000.0
LN_EPS = 1e-5
BATCH = 1
SEQ = 2048


class CohereLayerNorm(nn.Module):
    def __init__(self, hidden_size=None, eps=1e-5, bias=False):
        """The hidden size can be a tuple or an int. The tuple is used for QKNorm to normalize across head_dim"""
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        mean = hidden_states.mean(-1, keepdim=True)
        variance = (hidden_states - mean).pow(2).mean(-1, keepdim=True)
        hidden_states = (hidden_states - mean) * torch.rsqrt(variance + self.variance_epsilon)
        hidden_states = self.weight.to(torch.float32) * hidden_states
        return hidden_states.to(input_dtype)


class CohereRotaryEmbedding(nn.Module):
    def __init__(self, dim, base):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.repeat_interleave(freqs, 2, dim=-1)  # interleave() instead of cat()
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    # Split and rotate (even/odd lanes, not halves).
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    rot_x = torch.stack([-x2, x1], dim=-1).flatten(-2)
    return rot_x


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    dtype = q.dtype
    q = q.float()
    k = k.float()
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed.to(dtype=dtype), k_embed.to(dtype=dtype)


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


class CohereMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.up_proj = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.down_proj = nn.Linear(INTERMEDIATE, HIDDEN, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class CohereAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = HEAD_DIM
        self.num_key_value_groups = NUM_HEADS // NUM_KV_HEADS
        self.scaling = self.head_dim**-0.5
        self.q_proj = nn.Linear(HIDDEN, NUM_HEADS * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(HIDDEN, NUM_KV_HEADS * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(HIDDEN, NUM_KV_HEADS * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(NUM_HEADS * HEAD_DIM, HIDDEN, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape)
        key_states = self.k_proj(hidden_states).view(hidden_shape)
        value_states = self.v_proj(hidden_states).view(hidden_shape)
        query_states = query_states.transpose(1, 2)
        key_states = key_states.transpose(1, 2)
        value_states = value_states.transpose(1, 2)

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
        self.self_attn = CohereAttention()
        self.mlp = CohereMLP()
        self.input_layernorm = CohereLayerNorm(hidden_size=HIDDEN, eps=LN_EPS)
        self.rotary_emb = CohereRotaryEmbedding(HEAD_DIM, ROPE_THETA)
        with torch.no_grad():
            for mod in self.modules():
                if isinstance(mod, nn.Linear):
                    mod.weight.normal_(0.0, 0.02)
            self.input_layernorm.weight.copy_(1.0 + 0.1 * torch.randn_like(self.input_layernorm.weight))
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
        hidden_states = self.input_layernorm(hidden_states)

        # Self Attention
        hidden_states_attention = self.self_attn(hidden_states, position_embeddings, causal_mask)

        # Fully Connected
        hidden_states_mlp = self.mlp(hidden_states)

        # Add everything together
        hidden_states = residual + hidden_states_attention + hidden_states_mlp
        return hidden_states


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN, dtype=torch.float32)]


def get_init_inputs():
    return []
