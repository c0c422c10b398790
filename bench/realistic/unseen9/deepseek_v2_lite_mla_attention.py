"""DeepSeek-V2-Lite Multi-head Latent Attention (MLA) block, prefill, following the
model's own remote code modeling_deepseek.py (DeepseekV2Attention eager path,
DeepseekV2RMSNorm, DeepseekV2YarnRotaryEmbedding, the interleaved
apply_rotary_pos_emb), as loaded by Hugging Face transformers with trust_remote_code.

Keys/values are compressed to a 512-d latent (kv_a_proj_with_mqa + Llama-style
RMSNorm kv_a_layernorm) and expanded per head by kv_b_proj; a separate 64-d decoupled
RoPE key is shared by all heads. Config (DeepSeek-V2-Lite): hidden 2048, 16 heads,
q_lora_rank None (plain q_proj), kv_lora_rank 512, qk_nope_head_dim 128,
qk_rope_head_dim 64, v_head_dim 128, YaRN rope (factor 40, original 4096,
beta_fast 32, beta_slow 1, mscale = mscale_all_dim = 0.707), rope_theta 10000.
Shapes: batch 2 x 2048 tokens, prefill with causal attention mask.
Rough cost: ~115 GFLOP projections + ~85 GFLOP attention.

Departures: the cos/sin cache is built for 4096 positions instead of
max_position_embeddings (163840); position_ids (0..S-1) and the 4D additive causal
mask are built in forward instead of being passed by DeepseekV2Model; no KV cache.
Linear weights normal(0, 0.02) as _init_weights does; RMSNorm weight 1.
"""

import math

import torch
import torch.nn as nn

BATCH = 2
SEQ_LEN = 2048
HIDDEN = 2048
NUM_HEADS = 16
KV_LORA_RANK = 512
QK_NOPE_HEAD_DIM = 128
QK_ROPE_HEAD_DIM = 64
V_HEAD_DIM = 128
ROPE_THETA = 10000.0
ROPE_FACTOR = 40.0
ORIGINAL_MAX_POS = 4096
BETA_FAST = 32
BETA_SLOW = 1
MSCALE = 0.707
MSCALE_ALL_DIM = 0.707
CACHE_LEN = 4096
RMS_EPS = 1e-6
INIT_STD = 0.02


class DeepseekV2RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def yarn_find_correction_dim(num_rotations, dim, base=10000, max_position_embeddings=2048):
    return (dim * math.log(max_position_embeddings / (num_rotations * 2 * math.pi))) / (2 * math.log(base))


def yarn_find_correction_range(low_rot, high_rot, dim, base=10000, max_position_embeddings=2048):
    low = math.floor(yarn_find_correction_dim(low_rot, dim, base, max_position_embeddings))
    high = math.ceil(yarn_find_correction_dim(high_rot, dim, base, max_position_embeddings))
    return max(low, 0), min(high, dim - 1)


def yarn_get_mscale(scale=1, mscale=1):
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def yarn_linear_ramp_mask(min, max, dim):
    if min == max:
        max += 0.001
    linear_func = (torch.arange(dim, dtype=torch.float32) - min) / (max - min)
    ramp_func = torch.clamp(linear_func, 0, 1)
    return ramp_func


class DeepseekV2YarnRotaryEmbedding(nn.Module):
    def __init__(
        self,
        dim,
        max_position_embeddings,
        base,
        scaling_factor,
        original_max_position_embeddings,
        beta_fast,
        beta_slow,
        mscale,
        mscale_all_dim,
    ):
        super().__init__()
        self.dim = dim
        self.max_position_embeddings = max_position_embeddings
        self.base = base
        self.scaling_factor = scaling_factor
        self.original_max_position_embeddings = original_max_position_embeddings
        self.beta_fast = beta_fast
        self.beta_slow = beta_slow
        self.mscale = mscale
        self.mscale_all_dim = mscale_all_dim
        self._set_cos_sin_cache(max_position_embeddings, dtype=torch.get_default_dtype())

    def _set_cos_sin_cache(self, seq_len, dtype):
        self.max_seq_len_cached = seq_len
        dim = self.dim
        freq_extra = 1.0 / (self.base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        freq_inter = 1.0 / (
            self.scaling_factor * self.base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
        )
        low, high = yarn_find_correction_range(
            self.beta_fast, self.beta_slow, dim, self.base, self.original_max_position_embeddings
        )
        inv_freq_mask = 1.0 - yarn_linear_ramp_mask(low, high, dim // 2).to(dtype=torch.float32)
        inv_freq = freq_inter * (1 - inv_freq_mask) + freq_extra * inv_freq_mask
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        t = torch.arange(seq_len, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)
        _mscale = float(
            yarn_get_mscale(self.scaling_factor, self.mscale)
            / yarn_get_mscale(self.scaling_factor, self.mscale_all_dim)
        )
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", (emb.cos() * _mscale).to(dtype), persistent=False)
        self.register_buffer("sin_cached", (emb.sin() * _mscale).to(dtype), persistent=False)

    def forward(self, x, seq_len=None):
        return (self.cos_cached[:seq_len].to(dtype=x.dtype), self.sin_cached[:seq_len].to(dtype=x.dtype))


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids, unsqueeze_dim=1):
    cos = cos[position_ids].unsqueeze(unsqueeze_dim)
    sin = sin[position_ids].unsqueeze(unsqueeze_dim)

    b, h, s, d = q.shape
    q = q.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)

    b, h, s, d = k.shape
    k = k.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)

    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class DeepseekV2Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_dropout = 0.0
        self.hidden_size = HIDDEN
        self.num_heads = NUM_HEADS
        self.q_lora_rank = None
        self.qk_rope_head_dim = QK_ROPE_HEAD_DIM
        self.kv_lora_rank = KV_LORA_RANK
        self.v_head_dim = V_HEAD_DIM
        self.qk_nope_head_dim = QK_NOPE_HEAD_DIM
        self.q_head_dim = QK_NOPE_HEAD_DIM + QK_ROPE_HEAD_DIM
        self.is_causal = True

        self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.q_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(self.hidden_size, KV_LORA_RANK + QK_ROPE_HEAD_DIM, bias=False)
        self.kv_a_layernorm = DeepseekV2RMSNorm(KV_LORA_RANK, eps=RMS_EPS)
        self.kv_b_proj = nn.Linear(
            KV_LORA_RANK,
            self.num_heads * (self.q_head_dim - self.qk_rope_head_dim + self.v_head_dim),
            bias=False,
        )
        self.o_proj = nn.Linear(self.num_heads * self.v_head_dim, self.hidden_size, bias=False)
        self.rotary_emb = DeepseekV2YarnRotaryEmbedding(
            self.qk_rope_head_dim,
            max_position_embeddings=CACHE_LEN,
            base=ROPE_THETA,
            scaling_factor=ROPE_FACTOR,
            original_max_position_embeddings=ORIGINAL_MAX_POS,
            beta_fast=BETA_FAST,
            beta_slow=BETA_SLOW,
            mscale=MSCALE,
            mscale_all_dim=MSCALE_ALL_DIM,
        )
        self.softmax_scale = self.q_head_dim ** (-0.5)
        mscale = yarn_get_mscale(ROPE_FACTOR, MSCALE_ALL_DIM)
        self.softmax_scale = self.softmax_scale * mscale * mscale

    def forward(self, hidden_states, attention_mask, position_ids):
        bsz, q_len, _ = hidden_states.size()

        q = self.q_proj(hidden_states)
        q = q.view(bsz, q_len, self.num_heads, self.q_head_dim).transpose(1, 2)
        q_nope, q_pe = torch.split(q, [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)

        compressed_kv = self.kv_a_proj_with_mqa(hidden_states)
        compressed_kv, k_pe = torch.split(compressed_kv, [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        k_pe = k_pe.view(bsz, q_len, 1, self.qk_rope_head_dim).transpose(1, 2)
        kv = (
            self.kv_b_proj(self.kv_a_layernorm(compressed_kv))
            .view(bsz, q_len, self.num_heads, self.qk_nope_head_dim + self.v_head_dim)
            .transpose(1, 2)
        )
        k_nope, value_states = torch.split(kv, [self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        kv_seq_len = value_states.shape[-2]

        cos, sin = self.rotary_emb(value_states, seq_len=kv_seq_len)
        q_pe, k_pe = apply_rotary_pos_emb(q_pe, k_pe, cos, sin, position_ids)

        query_states = k_pe.new_empty(bsz, self.num_heads, q_len, self.q_head_dim)
        query_states[:, :, :, : self.qk_nope_head_dim] = q_nope
        query_states[:, :, :, self.qk_nope_head_dim :] = q_pe

        key_states = k_pe.new_empty(bsz, self.num_heads, q_len, self.q_head_dim)
        key_states[:, :, :, : self.qk_nope_head_dim] = k_nope
        key_states[:, :, :, self.qk_nope_head_dim :] = k_pe

        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.softmax_scale
        attn_weights = attn_weights + attention_mask

        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_weights = nn.functional.dropout(attn_weights, p=self.attention_dropout, training=self.training)
        attn_output = torch.matmul(attn_weights, value_states)

        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, self.num_heads * self.v_head_dim)
        attn_output = self.o_proj(attn_output)
        return attn_output


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = DeepseekV2Attention()
        for m in self.modules():
            if isinstance(m, nn.Linear):
                m.weight.data.normal_(mean=0.0, std=INIT_STD)
        self.eval()

    def forward(self, hidden_states):
        bsz, seq_len, _ = hidden_states.shape
        position_ids = torch.arange(seq_len, dtype=torch.long, device=hidden_states.device).unsqueeze(0)
        mask = torch.full(
            (seq_len, seq_len),
            torch.finfo(hidden_states.dtype).min,
            dtype=hidden_states.dtype,
            device=hidden_states.device,
        )
        mask = torch.triu(mask, diagonal=1)
        attention_mask = mask[None, None, :, :].expand(bsz, 1, seq_len, seq_len)
        return self.self_attn(hidden_states, attention_mask, position_ids)


def get_inputs():
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN)]


def get_init_inputs():
    return []
