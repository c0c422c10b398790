"""InternLM2-7B decoder layer (prefill).

Model / block
    InternLM2-7B (internlm/internlm2-7b, internlm/internlm2-chat-7b), one
    `InternLM2DecoderLayer`: RMSNorm -> GQA self-attention with a single packed
    `wqkv` projection laid out per KV group as [q_0 .. q_{g-1}, k, v] -> residual
    -> RMSNorm -> SwiGLU feed-forward (w1 / w3 / w2) -> residual.

Upstream code followed
    HF remote code `modeling_internlm2.py` shipped with internlm/internlm2-chat-7b
    (classes InternLM2RMSNorm, InternLM2RotaryEmbedding /
    InternLM2DynamicNTKScalingRotaryEmbedding, InternLM2MLP, InternLM2Attention,
    InternLM2DecoderLayer, functions rotate_half, apply_rotary_pos_emb, repeat_kv,
    _make_causal_mask).  The eager ("attn_implementation=eager") attention path
    is reproduced: the einops `rearrange(qkv, "b q (h gs d) -> b q h gs d")`
    split of the packed wqkv output, rotary via cos/sin caches gathered with
    `position_ids`, `repeat_kv`, explicit QK^T / sqrt(d) + additive causal mask,
    fp32 softmax, PV, `wo`.

Use case and shapes
    Prompt prefill of one 1024-token request (chat / RAG prompt) on one GPU:
    hidden_states (1, 1024, 4096).  hidden 4096, 32 query heads, 8 KV heads,
    head_dim 128, FFN 14336, rope_theta 1e6, max_position_embeddings 32768
    (the real 7B config).  The dynamic-NTK rotary only rescales beyond 32768
    tokens, so at 1024 tokens it equals the plain rotary used here.

    input : hidden_states float32 (1, 1024, 4096)
    output: float32 (1, 1024, 4096)

Cost (rough)
    Parameters 218.1 M (872 MB fp32) + 33.5 MB rotary caches.
    FLOPs: projections 2*1024*218.1M = 447 GFLOP; attention QK^T+PV
    4*32*1024^2*128 = 17 GFLOP; total ~464 GFLOP (~11.6 ms at 40 TFLOP/s).
    Bytes: ~0.9 GB weights + ~0.6 GB activations/scores moved.

Departures:
    - One decoder layer instead of 32; no embedding / LM head.
    - einops `rearrange` replaced by the equivalent `view`/`reshape` (only torch
      may be imported); the memory layout and slicing are the same.
    - position_ids and the causal mask are built inside forward (upstream builds
      them once in InternLM2Model.forward and passes them to every layer); no
      padding mask, no KV cache (use_cache=False, prefill only).
    - Weights use the upstream `_init_weights` (normal std 0.02); the RMSNorm
      weights, which upstream initialises to 1, are set to 1 + U(-0.2, 0.2) so
      the norm scale is not a no-op.
    - Dynamic-NTK branch (only active beyond 32768 tokens) omitted.
"""

import math

import torch
import torch.nn as nn

HIDDEN = 4096
N_HEADS = 32
N_KV_HEADS = 8
HEAD_DIM = HIDDEN // N_HEADS
INTERMEDIATE = 14336
ROPE_THETA = 1000000.0
MAX_POS = 32768
RMS_EPS = 1e-5
INIT_STD = 0.02

BATCH = 1
SEQ = 1024


class InternLM2RMSNorm(nn.Module):
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


class InternLM2RotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=2048, base=10000, device=None):
        super().__init__()
        self.dim = dim
        self.max_position_embeddings = max_position_embeddings
        self.base = base
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2).float().to(device) / self.dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._set_cos_sin_cache(
            seq_len=max_position_embeddings, device=self.inv_freq.device, dtype=torch.get_default_dtype()
        )

    def _set_cos_sin_cache(self, seq_len, device, dtype):
        self.max_seq_len_cached = seq_len
        t = torch.arange(self.max_seq_len_cached, device=device, dtype=self.inv_freq.dtype)
        freqs = torch.einsum("i,j->ij", t, self.inv_freq)
        # Different from paper, but it uses a different permutation in order to obtain the same calculation
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos().to(dtype), persistent=False)
        self.register_buffer("sin_cached", emb.sin().to(dtype), persistent=False)

    def forward(self, x, seq_len=None):
        # x: [bs, num_attention_heads, seq_len, head_size]
        if seq_len > self.max_seq_len_cached:
            self._set_cos_sin_cache(seq_len=seq_len, device=x.device, dtype=torch.float32)
        return (
            self.cos_cached[:seq_len].to(dtype=x.dtype),
            self.sin_cached[:seq_len].to(dtype=x.dtype),
        )


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids, unsqueeze_dim=1):
    cos = cos[position_ids].unsqueeze(unsqueeze_dim)
    sin = sin[position_ids].unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def _make_causal_mask(input_ids_shape, dtype, device, past_key_values_length=0):
    bsz, tgt_len = input_ids_shape
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, device=device)
    mask_cond = torch.arange(mask.size(-1), device=device)
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)


class InternLM2MLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.w1 = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.w3 = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.w2 = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        down_proj = self.w2(self.act_fn(self.w1(x)) * self.w3(x))
        return down_proj


class InternLM2Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden_size = HIDDEN
        self.num_heads = N_HEADS
        self.head_dim = HEAD_DIM
        self.num_key_value_heads = N_KV_HEADS
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.max_position_embeddings = MAX_POS
        self.wqkv = nn.Linear(
            self.hidden_size,
            (self.num_heads + 2 * self.num_key_value_heads) * self.head_dim,
            bias=False,
        )
        self.wo = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=False)
        self.rotary_emb = InternLM2RotaryEmbedding(
            self.head_dim, max_position_embeddings=self.max_position_embeddings, base=ROPE_THETA
        )

    def forward(self, hidden_states, attention_mask, position_ids):
        bsz, q_len, _ = hidden_states.size()

        qkv_states = self.wqkv(hidden_states)

        # rearrange(qkv_states, "b q (h gs d) -> b q h gs d", gs=2 + groups, d=head_dim)
        qkv_states = qkv_states.view(
            bsz, q_len, self.num_key_value_heads, 2 + self.num_key_value_groups, self.head_dim
        )

        query_states = qkv_states[..., : self.num_key_value_groups, :]
        # rearrange(query_states, "b q h gs d -> b q (h gs) d")
        query_states = query_states.reshape(bsz, q_len, self.num_heads, self.head_dim)
        key_states = qkv_states[..., -2, :]
        value_states = qkv_states[..., -1, :]

        query_states = query_states.transpose(1, 2)
        key_states = key_states.transpose(1, 2)
        value_states = value_states.transpose(1, 2)

        kv_seq_len = key_states.shape[-2]
        cos, sin = self.rotary_emb(value_states, seq_len=kv_seq_len)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin, position_ids)

        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)

        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)

        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask

        # upcast attention to fp32
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)

        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, self.hidden_size)

        attn_output = self.wo(attn_output)
        return attn_output


class InternLM2DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden_size = HIDDEN
        self.attention = InternLM2Attention()
        self.feed_forward = InternLM2MLP(HIDDEN, INTERMEDIATE)
        self.attention_norm = InternLM2RMSNorm(HIDDEN, eps=RMS_EPS)
        self.ffn_norm = InternLM2RMSNorm(HIDDEN, eps=RMS_EPS)

    def forward(self, hidden_states, attention_mask, position_ids):
        residual = hidden_states

        hidden_states = self.attention_norm(hidden_states)

        # Self Attention
        hidden_states = self.attention(
            hidden_states=hidden_states,
            attention_mask=attention_mask,
            position_ids=position_ids,
        )
        hidden_states = residual + hidden_states

        # Fully Connected
        residual = hidden_states
        hidden_states = self.ffn_norm(hidden_states)
        hidden_states = self.feed_forward(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = InternLM2DecoderLayer()
        # upstream InternLM2PreTrainedModel._init_weights
        for m in self.modules():
            if isinstance(m, nn.Linear):
                m.weight.data.normal_(mean=0.0, std=INIT_STD)
                if m.bias is not None:
                    m.bias.data.zero_()
        # Departure: non-trivial RMSNorm scales
        with torch.no_grad():
            for norm in (self.layer.attention_norm, self.layer.ffn_norm):
                norm.weight.add_(torch.empty_like(norm.weight).uniform_(-0.2, 0.2))
        self.eval()

    def forward(self, hidden_states):
        batch_size, seq_length = hidden_states.shape[:2]
        # InternLM2Model.forward: position ids and the 4D causal mask
        position_ids = torch.arange(0, seq_length, dtype=torch.long, device=hidden_states.device)
        position_ids = position_ids.unsqueeze(0)
        attention_mask = _make_causal_mask(
            (batch_size, seq_length), hidden_states.dtype, device=hidden_states.device
        )
        return self.layer(hidden_states, attention_mask, position_ids)


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN, dtype=torch.float32)]


def get_init_inputs():
    return []
