"""An encoder layer of CLIP ViT-L/14's text transformer (the text encoder Stable Diffusion v1
conditions on) as transformers writes it (CLIPEncoderLayer with CLIPAttention's eager path):
pre-LayerNorm (eps 1e-5), q/k/v projections with bias to 12 heads of 64, scores scaled by 1/8
plus the causal additive mask (built as transformers' AttentionMaskConverter._make_causal_mask
builds it: the dtype's minimum above the diagonal, expanded over the batch), softmax in fp32,
the weighted sum of values, the output projection and the residual; then LayerNorm, the MLP
768 -> 3072 -> 768 with quick_gelu (x * sigmoid(1.702 x), CLIP's own activation) and the
residual. Batch 16 prompts x 77 tokens (the tokenizer pads every prompt to 77; an NLP encoder
block)."""

import torch
import torch.nn as nn

HIDDEN, HEADS, INTERMEDIATE, EPS = 768, 12, 3072, 1e-5
BATCH, LENGTH = 16, 77


class QuickGELUActivation(nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return input * torch.sigmoid(1.702 * input)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    attn_weights = torch.matmul(query, key.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class CLIPAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_dim = HIDDEN
        self.num_heads = HEADS
        self.head_dim = self.embed_dim // self.num_heads
        self.scale = self.head_dim**-0.5
        self.k_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.v_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim)

    def forward(self, hidden_states, attention_mask=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        queries = self.q_proj(hidden_states)
        keys = self.k_proj(hidden_states)
        values = self.v_proj(hidden_states)

        queries = queries.view(hidden_shape).transpose(1, 2)
        keys = keys.view(hidden_shape).transpose(1, 2)
        values = values.view(hidden_shape).transpose(1, 2)

        attn_output, attn_weights = eager_attention_forward(
            self, queries, keys, values, attention_mask, scaling=self.scale, dropout=0.0
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.out_proj(attn_output)
        return attn_output, attn_weights


class CLIPMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.activation_fn = QuickGELUActivation()
        self.fc1 = nn.Linear(HIDDEN, INTERMEDIATE)
        self.fc2 = nn.Linear(INTERMEDIATE, HIDDEN)

    def forward(self, hidden_states):
        hidden_states = self.fc1(hidden_states)
        hidden_states = self.activation_fn(hidden_states)
        hidden_states = self.fc2(hidden_states)
        return hidden_states


def _make_causal_mask(input_ids_shape, dtype, device):
    bsz, tgt_len = input_ids_shape
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, device=device)
    mask_cond = torch.arange(mask.size(-1), device=device)
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_dim = HIDDEN
        self.self_attn = CLIPAttention()
        self.layer_norm1 = nn.LayerNorm(self.embed_dim, eps=EPS)
        self.mlp = CLIPMLP()
        self.layer_norm2 = nn.LayerNorm(self.embed_dim, eps=EPS)

    def forward(self, hidden_states):
        # CLIPTextTransformer's causal mask (no padding mask: prompts are padded to 77 and read whole)
        attention_mask = _make_causal_mask(hidden_states.shape[:2], hidden_states.dtype, hidden_states.device)

        residual = hidden_states
        hidden_states = self.layer_norm1(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states=hidden_states, attention_mask=attention_mask)
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.layer_norm2(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


def get_inputs():
    return [torch.randn(BATCH, LENGTH, HIDDEN)]


def get_init_inputs():
    return []
