"""Llama 3.2 11B Vision (Mllama) gated cross-attention decoder layer, as Hugging Face transformers
writes it in models/mllama/modeling_mllama.py (MllamaCrossAttentionDecoderLayer with
MllamaTextCrossAttention, eager attention). Text tokens attend to the image tokens: the query comes
from the text hidden states, key/value from the projected vision-encoder output (1 image x 4 tiles x
1601 patches = 6404 tokens, already through multi_modal_projector, hidden 4096). Grouped-query
attention with 32 query / 8 key-value heads (head_dim 128), per-head RMSNorm on q and k (q_norm,
k_norm), repeat_kv, softmax with the fp32 additive cross-attention mask, o_proj; the attention and
the SwiGLU MLP (intermediate 14336) outputs are gated by tanh(cross_attn_attn_gate) and
tanh(cross_attn_mlp_gate) and added to the residual stream (pre-norm RMSNorm, eps 1e-5). The
forward also runs _prepare_cross_attention_mask (repeat_interleave of the per-tile processor mask to
the 1601 patches, inversion to a finfo.min bias, and full_text_row_masked_out_mask for text rows that
see no image, which zeroes those rows of the MLP branch), which MllamaForConditionalGeneration does
once per forward. Gates (initialised at 0) and q/k norm scales are set to trained-looking values.
Use case: multimodal chat prefill, batch 1, 512 text tokens, one 4-tile 560x560 image."""

import torch
import torch.nn as nn

HIDDEN_SIZE = 4096
INTERMEDIATE_SIZE = 14336
NUM_HEADS = 32
NUM_KV_HEADS = 8
HEAD_DIM = HIDDEN_SIZE // NUM_HEADS
RMS_NORM_EPS = 1e-5
INITIALIZER_RANGE = 0.02
NUM_IMAGES, NUM_TILES = 1, 4
NUM_PATCHES = (560 // 14) ** 2 + 1  # 1601 patches per tile incl. class token
BATCH, TEXT_LEN = 1, 512
NUM_TILES_USED = 4  # the image was tiled into 4 tiles (mask columns of unused tiles would be 0)
IMAGE_TOKEN_POS = 1  # <|image|> comes right after <|begin_of_text|>; earlier tokens see no image


class MllamaTextRMSNorm(nn.Module):
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


class MllamaTextCrossAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_heads = NUM_HEADS
        self.num_key_value_heads = NUM_KV_HEADS
        self.dropout = 0.0
        self.hidden_size = HIDDEN_SIZE
        self.head_dim = HEAD_DIM
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.scaling = self.head_dim**-0.5

        self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=False)

        self.q_norm = MllamaTextRMSNorm(self.head_dim, eps=RMS_NORM_EPS)
        self.k_norm = MllamaTextRMSNorm(self.head_dim, eps=RMS_NORM_EPS)

    def forward(self, hidden_states, cross_attention_states, attention_mask):
        bsz, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states)
        query_states = query_states.view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        query_states = self.q_norm(query_states)

        key_states = self.k_proj(cross_attention_states)
        value_states = self.v_proj(cross_attention_states)
        key_states = key_states.view(bsz, -1, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        value_states = value_states.view(bsz, -1, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        key_states = self.k_norm(key_states)

        attn_output, attn_weights = eager_attention_forward(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            dropout=0.0 if not self.training else self.dropout,
            scaling=self.scaling,
        )
        attn_output = attn_output.reshape(bsz, q_len, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class MllamaTextMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN_SIZE, INTERMEDIATE_SIZE, bias=False)
        self.up_proj = nn.Linear(HIDDEN_SIZE, INTERMEDIATE_SIZE, bias=False)
        self.down_proj = nn.Linear(INTERMEDIATE_SIZE, HIDDEN_SIZE, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return down_proj


class MllamaCrossAttentionDecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.cross_attn = MllamaTextCrossAttention()
        self.input_layernorm = MllamaTextRMSNorm(HIDDEN_SIZE, eps=RMS_NORM_EPS)
        self.cross_attn_attn_gate = nn.Parameter(torch.zeros(1))
        self.mlp = MllamaTextMLP()
        self.post_attention_layernorm = MllamaTextRMSNorm(HIDDEN_SIZE, eps=RMS_NORM_EPS)
        self.cross_attn_mlp_gate = nn.Parameter(torch.zeros(1))

    def forward(
        self, hidden_states, cross_attention_states, cross_attention_mask, full_text_row_masked_out_mask
    ):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)

        hidden_states, attn_weights = self.cross_attn(
            hidden_states=hidden_states,
            attention_mask=cross_attention_mask,
            cross_attention_states=cross_attention_states,
        )
        hidden_states = residual + self.cross_attn_attn_gate.tanh() * hidden_states

        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        if full_text_row_masked_out_mask is not None:
            hidden_states = full_text_row_masked_out_mask[:, 0] * hidden_states  # type: ignore
        hidden_states = residual + self.cross_attn_mlp_gate.tanh() * hidden_states
        return hidden_states


def _prepare_cross_attention_mask(cross_attention_mask, num_vision_tokens, dtype):
    # reshape so it can be used by attn module
    batch_size, text_total_length, *_ = cross_attention_mask.shape
    cross_attention_mask = cross_attention_mask.repeat_interleave(num_vision_tokens, dim=3)
    cross_attention_mask = cross_attention_mask.view(batch_size, text_total_length, -1)
    cross_attention_mask = cross_attention_mask.unsqueeze(1)

    # invert the mask
    inverted_cross_attn_mask = (1.0 - cross_attention_mask).to(dtype)
    cross_attention_mask = inverted_cross_attn_mask.masked_fill(
        inverted_cross_attn_mask.to(torch.bool), torch.finfo(dtype).min
    )

    # apply full-row bias, which return 4D tensor of shape [B, H, S1, 1] where value is 0 if the a full row in cross attn mask's
    # last dimension contains negative infinity values, otherwise it's 1
    negative_inf_value = torch.finfo(dtype).min
    full_text_row_masked_out_mask = (
        (cross_attention_mask != negative_inf_value).any(dim=-1).type_as(cross_attention_mask)[..., None]
    )
    cross_attention_mask *= full_text_row_masked_out_mask

    return cross_attention_mask, full_text_row_masked_out_mask


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = MllamaCrossAttentionDecoderLayer()
        with torch.no_grad():
            for m in self.modules():  # MllamaPreTrainedModel._init_weights
                if isinstance(m, nn.Linear):
                    m.weight.normal_(mean=0.0, std=INITIALIZER_RANGE)
                elif isinstance(m, MllamaTextRMSNorm):
                    m.weight.uniform_(0.8, 1.2)  # trained-looking norm scales
            # trained per-head q/k norm scales are well above 1 (peaked attention over the image tokens)
            self.layer.cross_attn.q_norm.weight.uniform_(1.5, 2.5)
            self.layer.cross_attn.k_norm.weight.uniform_(1.5, 2.5)
            # trained gates (initialised at 0, which would switch the cross-attention layer off)
            self.layer.cross_attn_attn_gate.fill_(0.35)
            self.layer.cross_attn_mlp_gate.fill_(-0.2)
        self.eval()

    def forward(self, hidden_states, cross_attention_states, cross_attention_mask):
        # MllamaForConditionalGeneration.forward: mask preparation (once per forward)
        cross_attention_mask, full_text_row_masked_out_mask = _prepare_cross_attention_mask(
            cross_attention_mask,
            num_vision_tokens=cross_attention_states.shape[-2],
            dtype=hidden_states.dtype,
        )
        # multi_modal_projector output (B * images * tiles, 1601, 4096) -> per-sample image tokens
        cross_attention_states = cross_attention_states.reshape(
            -1, cross_attention_states.shape[-2], HIDDEN_SIZE
        )
        return self.layer(
            hidden_states, cross_attention_states, cross_attention_mask, full_text_row_masked_out_mask
        )


def get_inputs():
    hidden_states = torch.randn(BATCH, TEXT_LEN, HIDDEN_SIZE)
    cross_attention_states = torch.randn(BATCH * NUM_IMAGES * NUM_TILES, NUM_PATCHES, HIDDEN_SIZE)
    # MllamaProcessor's cross_attention_mask: (batch, text_len, num_images, max_num_tiles), 1 = token sees tile
    cross_attention_mask = torch.zeros(BATCH, TEXT_LEN, NUM_IMAGES, NUM_TILES, dtype=torch.long)
    cross_attention_mask[:, IMAGE_TOKEN_POS:, :, :NUM_TILES_USED] = 1
    return [hidden_states, cross_attention_states, cross_attention_mask]


def get_init_inputs():
    return []
