"""Falcon-7B's decoder layer as transformers writes it (FalconDecoderLayer with
parallel_attn=True, multi_query=True, new_decoder_architecture=False, bias=False), with the
eager attention path: one input_layernorm (LayerNorm, eps 1e-5) feeding both the attention and
the MLP; the fused query_key_value FalconLinear 4544 -> 4544 + 2 x 64 (71 query heads and one
shared key/value head, split by a view and [-2] / [-1] indexing), rotary embeddings (rotate_half,
as Llama's, theta 10000, cos/sin from the model's FalconRotaryEmbedding), scores
query @ key^T broadcast over the single key head, divided in place by sqrt(64), plus the causal
mask (0 / finfo.min, as the model builds it for eager), softmax, @ value, the dense projection;
FalconMLP 4544 -> 18176 -> 4544 with exact GELU; then mlp_output += attention_output and the
residual add. A prefill of batch 1 x 256 prompt tokens (an LLM block)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import LayerNorm

HIDDEN, N_HEAD, FFN_HIDDEN, EPS, ROPE_THETA = 4544, 71, 18176, 1e-5, 10000.0
BATCH, LENGTH = 1, 256


class FalconLinear(nn.Linear):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        hidden_states = input @ self.weight.T
        if self.bias is None:
            return hidden_states
        return hidden_states + self.bias


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class FalconRotaryEmbedding(nn.Module):
    def __init__(self, dim, base):
        super().__init__()
        self.attention_scaling = 1.0
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, position_ids):
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def dropout_add(x: torch.Tensor, residual: torch.Tensor, prob: float, training: bool) -> torch.Tensor:
    out = F.dropout(x, p=prob, training=training)
    out = residual + out
    return out


class FalconAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden_size = HIDDEN
        self.num_heads = N_HEAD
        self.head_dim = self.hidden_size // self.num_heads
        self.split_size = self.hidden_size
        self.inv_norm_factor = 1.0 / math.sqrt(self.head_dim)
        self.beta = self.inv_norm_factor
        # multi_query: one key head and one value head shared by the 71 query heads
        qkv_out_dim = self.hidden_size + 2 * self.head_dim
        self.query_key_value = FalconLinear(self.hidden_size, qkv_out_dim, bias=False)
        self.multi_query = True
        self.dense = FalconLinear(self.hidden_size, self.hidden_size, bias=False)
        self.attention_dropout = nn.Dropout(0.0)
        self.num_kv_heads = 1

    def _split_heads(self, fused_qkv: torch.Tensor):
        batch_size, seq_length, three_times_hidden_size = fused_qkv.shape
        fused_qkv = fused_qkv.view(batch_size, seq_length, self.num_heads + 2, self.head_dim)
        return fused_qkv[..., :-2, :], fused_qkv[..., [-2], :], fused_qkv[..., [-1], :]

    def forward(self, hidden_states, alibi, attention_mask, position_embeddings=None):
        fused_qkv = self.query_key_value(hidden_states)  # [batch_size, seq_length, 3 x hidden_size]
        num_kv_heads = self.num_kv_heads
        # 3 x [batch_size, seq_length, num_heads, head_dim]
        (query_layer, key_layer, value_layer) = self._split_heads(fused_qkv)

        batch_size, query_length, _, _ = query_layer.shape

        query_layer = query_layer.transpose(1, 2).reshape(
            batch_size, self.num_heads, query_length, self.head_dim
        )
        key_layer = key_layer.transpose(1, 2).reshape(batch_size, num_kv_heads, query_length, self.head_dim)
        value_layer = value_layer.transpose(1, 2).reshape(
            batch_size, num_kv_heads, query_length, self.head_dim
        )

        if alibi is None:
            cos, sin = position_embeddings
            query_layer, key_layer = apply_rotary_pos_emb(query_layer, key_layer, cos, sin)

        # eager attention
        attention_scores = query_layer @ key_layer.transpose(-1, -2)
        attention_scores /= math.sqrt(self.head_dim)

        attention_scores = F.softmax(attention_scores + attention_mask, dim=-1, dtype=hidden_states.dtype)
        # It is unclear why dropout is not applied here (while it is with alibi).
        attn_output = attention_scores @ value_layer

        attn_output = attn_output.view(batch_size, self.num_heads, query_length, self.head_dim)
        attn_output = attn_output.permute(0, 2, 1, 3)
        attn_output = attn_output.reshape(batch_size, query_length, self.num_heads * self.head_dim)

        attn_output = self.dense(attn_output)

        return attn_output, attention_scores


class FalconMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense_h_to_4h = FalconLinear(HIDDEN, FFN_HIDDEN, bias=False)
        self.act = nn.GELU()
        self.dense_4h_to_h = FalconLinear(FFN_HIDDEN, HIDDEN, bias=False)
        self.hidden_dropout = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.dense_h_to_4h(x))
        x = self.dense_4h_to_h(x)
        return x


class FalconDecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attention = FalconAttention()
        self.mlp = FalconMLP()
        self.hidden_dropout = 0.0
        # parallel_attn with a single layer norm (Falcon-7B)
        self.input_layernorm = LayerNorm(HIDDEN, eps=EPS)

    def forward(self, hidden_states, alibi, attention_mask, position_embeddings=None):
        residual = hidden_states

        attention_layernorm_out = self.input_layernorm(hidden_states)

        # Self attention.
        attention_output, attn_weights = self.self_attention(
            attention_layernorm_out,
            alibi=alibi,
            attention_mask=attention_mask,
            position_embeddings=position_embeddings,
        )

        # parallel_attn: the MLP reads the same normalised input
        mlp_layernorm_out = attention_layernorm_out

        # MLP.
        mlp_output = self.mlp(mlp_layernorm_out)

        mlp_output += attention_output

        output = dropout_add(mlp_output, residual, self.hidden_dropout, training=self.training)

        return output, attn_weights


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary_emb = FalconRotaryEmbedding(HIDDEN // N_HEAD, ROPE_THETA)
        self.h = FalconDecoderLayer()
        # the 4-D float causal mask FalconModel passes to an eager layer (no padding in this prompt)
        min_dtype = torch.finfo(torch.float32).min
        causal_mask = torch.full((LENGTH, LENGTH), min_dtype, dtype=torch.float32).triu(1)
        self.register_buffer("causal_mask", causal_mask[None, None, :, :], persistent=False)
        with torch.no_grad():  # a trained norm
            self.h.input_layernorm.weight.uniform_(0.5, 1.5)
            self.h.input_layernorm.bias.uniform_(-0.1, 0.1)
        self.eval()

    def forward(self, hidden_states):
        position_ids = torch.arange(hidden_states.shape[1], device=hidden_states.device).unsqueeze(0)
        position_embeddings = self.rotary_emb(hidden_states, position_ids=position_ids)
        output, _ = self.h(
            hidden_states,
            alibi=None,
            attention_mask=self.causal_mask,
            position_embeddings=position_embeddings,
        )
        return output


def get_inputs():
    return [torch.randn(BATCH, LENGTH, HIDDEN)]


def get_init_inputs():
    return []
