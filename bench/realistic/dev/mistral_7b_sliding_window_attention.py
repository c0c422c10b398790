"""Mistral-7B-v0.1 sliding-window self-attention layer, prefill of a long prompt, as Hugging Face
transformers writes it in models/mistral/modeling_mistral.py with attn_implementation="eager":
MistralModel builds the rotary cos/sin (MistralRotaryEmbedding, theta 10000, attention_scaling 1)
and the 4D additive causal mask with the sliding window (_prepare_4d_causal_attention_mask_with_cache_position:
a key j is masked for query i when j > i or j <= i - sliding_window, plus the 2D padding mask), then
MistralAttention projects q/k/v (grouped-query attention: 32 query heads, 8 key/value heads,
head_dim 128, no biases), applies rotate_half rotary embedding, repeat_kv's the keys/values to 32
heads, computes softmax(QK^T / sqrt(128) + mask) V with the full fp32 score matrix, and applies o_proj.
Sliding window 4096 tokens (Mistral-7B-v0.1 config); the prompt is 5120 tokens long so the window
really cuts off the first 1024 keys for the last rows. Input is the output of input_layernorm.
Use case: long-context prompt prefill, batch 1 x 5120 tokens, hidden size 4096."""

import torch
import torch.nn as nn

HIDDEN_SIZE = 4096
NUM_HEADS = 32
NUM_KV_HEADS = 8
HEAD_DIM = HIDDEN_SIZE // NUM_HEADS
ROPE_THETA = 10000.0
SLIDING_WINDOW = 4096
INITIALIZER_RANGE = 0.02
BATCH, SEQ_LEN = 1, 5120


class MistralRotaryEmbedding(nn.Module):
    def __init__(self, dim, base):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0  # "default" rope type

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
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


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)

    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask

    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class MistralAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = HEAD_DIM
        self.num_key_value_groups = NUM_HEADS // NUM_KV_HEADS
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = 0.0
        self.q_proj = nn.Linear(HIDDEN_SIZE, NUM_HEADS * self.head_dim, bias=False)
        self.k_proj = nn.Linear(HIDDEN_SIZE, NUM_KV_HEADS * self.head_dim, bias=False)
        self.v_proj = nn.Linear(HIDDEN_SIZE, NUM_KV_HEADS * self.head_dim, bias=False)
        self.o_proj = nn.Linear(NUM_HEADS * self.head_dim, HIDDEN_SIZE, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        attn_output, attn_weights = eager_attention_forward(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
        )

        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


def prepare_4d_causal_attention_mask_with_cache_position(
    attention_mask, sequence_length, target_length, dtype, device, cache_position, batch_size, sliding_window
):
    min_dtype = torch.finfo(dtype).min
    causal_mask = torch.full(
        (sequence_length, target_length), fill_value=min_dtype, dtype=dtype, device=device
    )
    diagonal_attend_mask = torch.arange(target_length, device=device) > cache_position.reshape(-1, 1)
    if sliding_window is not None:
        # if we have sliding window, we should not attend to tokens beyond sliding window length, so we mask them out also
        sliding_attend_mask = torch.arange(target_length, device=device) <= (
            cache_position.reshape(-1, 1) - sliding_window
        )
        diagonal_attend_mask.bitwise_or_(sliding_attend_mask)
    causal_mask *= diagonal_attend_mask
    causal_mask = causal_mask[None, None, :, :].expand(batch_size, 1, -1, -1)
    if attention_mask is not None:
        causal_mask = causal_mask.clone()  # copy to contiguous memory for in-place edit
        if attention_mask.shape[-1] > target_length:
            attention_mask = attention_mask[:, :target_length]
        mask_length = attention_mask.shape[-1]
        padding_mask = causal_mask[:, :, :, :mask_length] + attention_mask[:, None, None, :].to(
            causal_mask.device
        )
        padding_mask = padding_mask == 0
        causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(
            padding_mask, min_dtype
        )
    return causal_mask


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary_emb = MistralRotaryEmbedding(HEAD_DIM, ROPE_THETA)
        self.self_attn = MistralAttention()
        for m in self.modules():  # MistralPreTrainedModel._init_weights
            if isinstance(m, nn.Linear):
                m.weight.data.normal_(mean=0.0, std=INITIALIZER_RANGE)
                if m.bias is not None:
                    m.bias.data.zero_()
        self.eval()

    def forward(self, hidden_states, attention_mask):
        # MistralModel.forward: cache_position / position_ids, causal mask, rotary embeddings
        batch_size, seq_len = hidden_states.shape[:2]
        cache_position = torch.arange(0, seq_len, device=hidden_states.device)
        position_ids = cache_position.unsqueeze(0)
        causal_mask = prepare_4d_causal_attention_mask_with_cache_position(
            attention_mask,
            sequence_length=seq_len,
            target_length=seq_len,
            dtype=hidden_states.dtype,
            device=hidden_states.device,
            cache_position=cache_position,
            batch_size=batch_size,
            sliding_window=SLIDING_WINDOW,
        )
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        # MistralDecoderLayer: self-attention on the input_layernorm output
        attn_output, _ = self.self_attn(hidden_states, position_embeddings, causal_mask)
        return attn_output


def get_inputs():
    hidden_states = torch.randn(BATCH, SEQ_LEN, HIDDEN_SIZE)
    attention_mask = torch.ones(BATCH, SEQ_LEN, dtype=torch.long)
    return [hidden_states, attention_mask]


def get_init_inputs():
    return []
