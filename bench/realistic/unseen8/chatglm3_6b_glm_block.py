"""ChatGLM3-6B transformer layer (GLMBlock) with the model's rotary-embedding setup, as THUDM's
modeling_chatglm.py (trust_remote_code model on the Hugging Face hub) writes it, run with PyTorch 2
(CoreAttention takes its scaled_dot_product_attention branch, is_causal=True, no padding mask).
Layout is sequence-first [s, b, h] as in the original code. ChatGLMModel computes the rotary cache
for the whole configured seq_length (8192) every forward, gathers it with position_ids and
transposes it to [s, b, 32, 2]. GLMBlock: RMSNorm (eps 1e-5) -> SelfAttention (fused
query_key_value Linear with bias; multi-query attention with 32 query heads and 2 key/value groups,
head_dim 128; ChatGLM's partial interleaved rotary embedding applied to the first 64 of the 128
dims of each head, the other 64 pass through; the 2 kv groups are expanded/copied to 32 heads) ->
dense (no bias) -> residual -> RMSNorm -> MLP (dense_h_to_4h to 2 x 13696, swiglu via torch.chunk,
dense_4h_to_h) -> residual.
Use case: chat prompt prefill, batch 1 x 1024 tokens, hidden size 4096."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

HIDDEN_SIZE = 4096
NUM_HEADS = 32
KV_CHANNELS = 128
MULTI_QUERY_GROUP_NUM = 2
FFN_HIDDEN_SIZE = 13696
LAYERNORM_EPSILON = 1e-5
SEQ_LENGTH_CONFIG = 8192  # config.seq_length: size of the rotary cache built each forward
ADD_QKV_BIAS = True
ADD_BIAS_LINEAR = False
BATCH, SEQ_LEN = 1, 1024


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, original_impl=False, device=None, dtype=None):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=device).to(dtype=dtype) / dim))
        self.register_buffer("inv_freq", inv_freq)
        self.dim = dim
        self.original_impl = original_impl

    def forward_impl(
        self, seq_len: int, n_elem: int, dtype: torch.dtype, device: torch.device, base: int = 10000
    ):
        """Enhanced Transformer with Rotary Position Embedding."""
        # $\Theta = {\theta_i = 10000^{\frac{2(i-1)}{d}}, i \in [1, 2, ..., \frac{d}{2}]}$
        theta = 1.0 / (base ** (torch.arange(0, n_elem, 2, dtype=dtype, device=device) / n_elem))

        # Create position indexes `[0, 1, ..., seq_len - 1]`
        seq_idx = torch.arange(seq_len, dtype=dtype, device=device)

        # Calculate the product of position index and $\theta_i$
        idx_theta = torch.outer(seq_idx, theta).float()

        cache = torch.stack([torch.cos(idx_theta), torch.sin(idx_theta)], dim=-1)

        # this is to mimic the behaviour of complex32, else we will get different results
        if dtype in (torch.float16, torch.bfloat16, torch.int8):
            cache = cache.bfloat16() if dtype == torch.bfloat16 else cache.half()
        return cache

    def forward(self, max_seq_len, offset=0):
        return self.forward_impl(
            max_seq_len, self.dim, dtype=self.inv_freq.dtype, device=self.inv_freq.device
        )


def apply_rotary_pos_emb(x: torch.Tensor, rope_cache: torch.Tensor) -> torch.Tensor:
    # x: [sq, b, np, hn]
    sq, _b, np, _hn = x.size(0), x.size(1), x.size(2), x.size(3)
    rot_dim = rope_cache.shape[-2] * 2
    x, x_pass = x[..., :rot_dim], x[..., rot_dim:]
    # truncate to support variable sizes
    rope_cache = rope_cache[:sq]
    xshaped = x.reshape(sq, -1, np, rot_dim // 2, 2)
    rope_cache = rope_cache.view(sq, -1, 1, xshaped.size(3), 2)
    x_out2 = torch.stack(
        [
            xshaped[..., 0] * rope_cache[..., 0] - xshaped[..., 1] * rope_cache[..., 1],
            xshaped[..., 1] * rope_cache[..., 0] + xshaped[..., 0] * rope_cache[..., 1],
        ],
        -1,
    )
    x_out2 = x_out2.flatten(3)
    return torch.cat((x_out2, x_pass), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, normalized_shape, eps=1e-5, device=None, dtype=None, **kwargs):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(normalized_shape, device=device, dtype=dtype))
        self.eps = eps

    def forward(self, hidden_states: torch.Tensor):
        input_dtype = hidden_states.dtype
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)

        return (self.weight * hidden_states).to(input_dtype)


class CoreAttention(nn.Module):
    def __init__(self, layer_number):
        super().__init__()
        self.apply_query_key_layer_scaling = True
        self.attention_softmax_in_fp32 = True
        self.layer_number = max(1, layer_number)
        projection_size = KV_CHANNELS * NUM_HEADS
        self.hidden_size_per_partition = projection_size
        self.hidden_size_per_attention_head = projection_size // NUM_HEADS
        self.num_attention_heads_per_partition = NUM_HEADS
        coeff = None
        self.norm_factor = math.sqrt(self.hidden_size_per_attention_head)
        if self.apply_query_key_layer_scaling:
            coeff = self.layer_number
            self.norm_factor *= coeff
        self.coeff = coeff
        self.attention_dropout = nn.Dropout(0.0)

    def forward(self, query_layer, key_layer, value_layer, attention_mask):
        # PyTorch >= 2 branch of the original code
        query_layer, key_layer, value_layer = [
            k.permute(1, 2, 0, 3) for k in [query_layer, key_layer, value_layer]
        ]
        if attention_mask is None and query_layer.shape[2] == key_layer.shape[2]:
            context_layer = F.scaled_dot_product_attention(
                query_layer, key_layer, value_layer, is_causal=True
            )
        else:
            if attention_mask is not None:
                attention_mask = ~attention_mask
            context_layer = F.scaled_dot_product_attention(
                query_layer, key_layer, value_layer, attention_mask
            )
        context_layer = context_layer.permute(2, 0, 1, 3)
        new_context_layer_shape = context_layer.size()[:-2] + (self.hidden_size_per_partition,)
        context_layer = context_layer.reshape(*new_context_layer_shape)
        return context_layer


class SelfAttention(nn.Module):
    def __init__(self, layer_number):
        super().__init__()
        self.layer_number = max(1, layer_number)
        self.projection_size = KV_CHANNELS * NUM_HEADS
        self.hidden_size_per_attention_head = self.projection_size // NUM_HEADS
        self.num_attention_heads_per_partition = NUM_HEADS
        self.multi_query_attention = True
        self.qkv_hidden_size = 3 * self.projection_size
        if self.multi_query_attention:
            self.num_multi_query_groups_per_partition = MULTI_QUERY_GROUP_NUM
            self.qkv_hidden_size = (
                self.projection_size + 2 * self.hidden_size_per_attention_head * MULTI_QUERY_GROUP_NUM
            )
        self.query_key_value = nn.Linear(
            HIDDEN_SIZE, self.qkv_hidden_size, bias=ADD_BIAS_LINEAR or ADD_QKV_BIAS
        )
        self.core_attention = CoreAttention(self.layer_number)
        self.dense = nn.Linear(self.projection_size, HIDDEN_SIZE, bias=ADD_BIAS_LINEAR)

    def forward(self, hidden_states, attention_mask, rotary_pos_emb, kv_cache=None, use_cache=False):
        # hidden_states: [sq, b, h]
        # Attention heads [sq, b, h] --> [sq, b, (np * 3 * hn)]
        mixed_x_layer = self.query_key_value(hidden_states)

        if self.multi_query_attention:
            (query_layer, key_layer, value_layer) = mixed_x_layer.split(
                [
                    self.num_attention_heads_per_partition * self.hidden_size_per_attention_head,
                    self.num_multi_query_groups_per_partition * self.hidden_size_per_attention_head,
                    self.num_multi_query_groups_per_partition * self.hidden_size_per_attention_head,
                ],
                dim=-1,
            )
            query_layer = query_layer.view(
                query_layer.size()[:-1]
                + (self.num_attention_heads_per_partition, self.hidden_size_per_attention_head)
            )
            key_layer = key_layer.view(
                key_layer.size()[:-1]
                + (self.num_multi_query_groups_per_partition, self.hidden_size_per_attention_head)
            )
            value_layer = value_layer.view(
                value_layer.size()[:-1]
                + (self.num_multi_query_groups_per_partition, self.hidden_size_per_attention_head)
            )

        # apply relative positional encoding (rotary embedding)
        if rotary_pos_emb is not None:
            query_layer = apply_rotary_pos_emb(query_layer, rotary_pos_emb)
            key_layer = apply_rotary_pos_emb(key_layer, rotary_pos_emb)

        # adjust key and value for inference
        if kv_cache is not None:
            cache_k, cache_v = kv_cache
            key_layer = torch.cat((cache_k, key_layer), dim=0)
            value_layer = torch.cat((cache_v, value_layer), dim=0)
        if use_cache:
            kv_cache = (key_layer, value_layer)
        else:
            kv_cache = None

        if self.multi_query_attention:
            key_layer = key_layer.unsqueeze(-2)
            key_layer = key_layer.expand(
                -1,
                -1,
                -1,
                self.num_attention_heads_per_partition // self.num_multi_query_groups_per_partition,
                -1,
            )
            key_layer = key_layer.contiguous().view(
                key_layer.size()[:2]
                + (self.num_attention_heads_per_partition, self.hidden_size_per_attention_head)
            )
            value_layer = value_layer.unsqueeze(-2)
            value_layer = value_layer.expand(
                -1,
                -1,
                -1,
                self.num_attention_heads_per_partition // self.num_multi_query_groups_per_partition,
                -1,
            )
            value_layer = value_layer.contiguous().view(
                value_layer.size()[:2]
                + (self.num_attention_heads_per_partition, self.hidden_size_per_attention_head)
            )

        # core attention computation
        context_layer = self.core_attention(query_layer, key_layer, value_layer, attention_mask)

        # Output. [sq, b, h]
        output = self.dense(context_layer)
        return output, kv_cache


def swiglu(x):
    x = torch.chunk(x, 2, dim=-1)
    return F.silu(x[0]) * x[1]


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_bias = ADD_BIAS_LINEAR
        # Project to 4h. If using swiglu double the output width, see https://arxiv.org/pdf/2002.05202.pdf
        self.dense_h_to_4h = nn.Linear(HIDDEN_SIZE, FFN_HIDDEN_SIZE * 2, bias=self.add_bias)
        self.activation_func = swiglu
        # Project back to h.
        self.dense_4h_to_h = nn.Linear(FFN_HIDDEN_SIZE, HIDDEN_SIZE, bias=self.add_bias)

    def forward(self, hidden_states):
        # [s, b, 4hp]
        intermediate_parallel = self.dense_h_to_4h(hidden_states)
        intermediate_parallel = self.activation_func(intermediate_parallel)
        # [s, b, h]
        output = self.dense_4h_to_h(intermediate_parallel)
        return output


class GLMBlock(nn.Module):
    def __init__(self, layer_number):
        super().__init__()
        self.layer_number = layer_number
        self.apply_residual_connection_post_layernorm = False
        self.fp32_residual_connection = False
        self.input_layernorm = RMSNorm(HIDDEN_SIZE, eps=LAYERNORM_EPSILON)
        self.self_attention = SelfAttention(layer_number)
        self.hidden_dropout = 0.0
        self.post_attention_layernorm = RMSNorm(HIDDEN_SIZE, eps=LAYERNORM_EPSILON)
        self.mlp = MLP()

    def forward(self, hidden_states, attention_mask, rotary_pos_emb, kv_cache=None, use_cache=False):
        # hidden_states: [s, b, h]
        # Layer norm at the beginning of the transformer layer.
        layernorm_output = self.input_layernorm(hidden_states)
        # Self attention.
        attention_output, kv_cache = self.self_attention(
            layernorm_output, attention_mask, rotary_pos_emb, kv_cache=kv_cache, use_cache=use_cache
        )

        # Residual connection.
        if self.apply_residual_connection_post_layernorm:
            residual = layernorm_output
        else:
            residual = hidden_states

        layernorm_input = F.dropout(attention_output, p=self.hidden_dropout, training=self.training)
        layernorm_input = residual + layernorm_input

        # Layer norm post the self attention.
        layernorm_output = self.post_attention_layernorm(layernorm_input)

        # MLP.
        mlp_output = self.mlp(layernorm_output)

        # Second residual connection.
        if self.apply_residual_connection_post_layernorm:
            residual = layernorm_output
        else:
            residual = layernorm_input

        output = F.dropout(mlp_output, p=self.hidden_dropout, training=self.training)
        output = residual + output
        return output, kv_cache


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        rotary_dim = HIDDEN_SIZE // NUM_HEADS if KV_CHANNELS is None else KV_CHANNELS
        self.rotary_pos_emb = RotaryEmbedding(rotary_dim // 2, original_impl=True, dtype=torch.float32)
        self.seq_length = SEQ_LENGTH_CONFIG
        self.layer = GLMBlock(layer_number=14)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    m.weight.normal_(0.0, 0.02)
                    if m.bias is not None:
                        m.bias.normal_(0.0, 0.02)
                elif isinstance(m, RMSNorm):
                    m.weight.uniform_(0.8, 1.2)
        self.eval()

    def forward(self, hidden_states, position_ids):
        # ChatGLMModel.forward: inputs_embeds is [s, b, h]; full_attention_mask is None for an unpadded prompt
        full_attention_mask = None
        seq_length = hidden_states.shape[0]
        # Rotary positional embeddings
        rotary_pos_emb = self.rotary_pos_emb(self.seq_length)
        if position_ids is not None:
            rotary_pos_emb = rotary_pos_emb[position_ids]
        else:
            rotary_pos_emb = rotary_pos_emb[None, :seq_length]
        rotary_pos_emb = rotary_pos_emb.transpose(0, 1).contiguous()
        output, _ = self.layer(
            hidden_states, full_attention_mask, rotary_pos_emb, kv_cache=None, use_cache=False
        )
        return output


def get_inputs():
    hidden_states = torch.randn(SEQ_LEN, BATCH, HIDDEN_SIZE)  # [s, b, h] as inside ChatGLMModel
    position_ids = torch.arange(SEQ_LEN, dtype=torch.long).unsqueeze(0).repeat(BATCH, 1)
    return [hidden_states, position_ids]


def get_init_inputs():
    return []
