"""Three consecutive ModernBERT-base encoder layers (answerdotai/ModernBERT-base, layers 4, 5, 6:
local, local, global) as transformers writes them in modeling_modernbert.py with the eager
attention path. ModernBertModel._update_attention_mask turns the padding mask into a 4-D additive
mask (_prepare_4d_attention_mask, finfo.min) and a sliding-window copy (|i - j| <= 64, i.e. a
128-token local window). Each ModernBertEncoderLayer: pre-LayerNorm without bias -> fused Wqkv
(768 -> 2304, no bias) viewed (bs, seq, 3, heads, head_dim), transpose(3, 1).unbind(2), rotary
embedding (theta 10000 for local layers, 160000 for the global one), matmul / scale + mask,
fp32 softmax, matmul, Wo; residual; LayerNorm -> GeGLU MLP (Wi 768 -> 2 x 1152, chunk, exact
GELU(input) * gate, Wo 1152 -> 768); residual. Use case: embedding / retrieval encoder serving,
batch 16 documents padded to 512 tokens."""

import torch
import torch.nn as nn

HIDDEN_SIZE = 768
NUM_HEADS = 12
INTERMEDIATE_SIZE = 1152
NORM_EPS = 1e-5
GLOBAL_ATTN_EVERY_N_LAYERS = 3
LOCAL_ATTENTION = 128
GLOBAL_ROPE_THETA = 160000.0
LOCAL_ROPE_THETA = 10000.0
LAYER_IDS = (4, 5, 6)
BATCH, SEQ_LEN = 16, 512


class ModernBertRotaryEmbedding(nn.Module):
    def __init__(self, dim, base):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
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
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def eager_attention_forward(
    module,
    qkv,
    attention_mask,
    sliding_window_mask,
    position_ids,
    local_attention,
    bs,
    dim,
    output_attentions=False,
    **_kwargs,
):
    # qkv: [batch_size, seqlen, 3, nheads, headdim]
    cos, sin = module.rotary_emb(qkv, position_ids=position_ids)
    query, key, value = qkv.transpose(3, 1).unbind(dim=2)
    # query, key, value: [batch_size, heads, seq_len, head_dim]
    query, key = apply_rotary_pos_emb(query, key, cos, sin)

    scale = module.head_dim**-0.5
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scale

    if local_attention != (-1, -1):
        attention_mask = sliding_window_mask

    attn_weights = attn_weights + attention_mask

    # upcast attention to fp32
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=module.attention_dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value)
    attn_output = attn_output.transpose(1, 2).contiguous()
    attn_output = attn_output.view(bs, -1, dim)
    if output_attentions:
        return (attn_output, attn_weights)
    return (attn_output,)


class ModernBertAttention(nn.Module):
    def __init__(self, layer_id):
        super().__init__()
        self.layer_id = layer_id
        self.attention_dropout = 0.0
        self.num_heads = NUM_HEADS
        self.head_dim = HIDDEN_SIZE // NUM_HEADS
        self.all_head_size = self.head_dim * self.num_heads
        self.Wqkv = nn.Linear(HIDDEN_SIZE, 3 * self.all_head_size, bias=False)

        if layer_id % GLOBAL_ATTN_EVERY_N_LAYERS != 0:
            self.local_attention = (LOCAL_ATTENTION // 2, LOCAL_ATTENTION // 2)
            rope_theta = LOCAL_ROPE_THETA
        else:
            self.local_attention = (-1, -1)
            rope_theta = GLOBAL_ROPE_THETA

        self.rotary_emb = ModernBertRotaryEmbedding(dim=self.head_dim, base=rope_theta)
        self.Wo = nn.Linear(HIDDEN_SIZE, HIDDEN_SIZE, bias=False)
        self.out_drop = nn.Identity()

    def forward(self, hidden_states, output_attentions=False, **kwargs):
        qkv = self.Wqkv(hidden_states)

        bs = hidden_states.shape[0]
        qkv = qkv.view(bs, -1, 3, self.num_heads, self.head_dim)

        attn_outputs = eager_attention_forward(
            self,
            qkv=qkv,
            local_attention=self.local_attention,
            bs=bs,
            dim=self.all_head_size,
            output_attentions=output_attentions,
            **kwargs,
        )
        hidden_states = attn_outputs[0]
        hidden_states = self.out_drop(self.Wo(hidden_states))

        return (hidden_states,) + attn_outputs[1:]  # add attentions if outputted


class ModernBertMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.Wi = nn.Linear(HIDDEN_SIZE, int(INTERMEDIATE_SIZE) * 2, bias=False)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.0)
        self.Wo = nn.Linear(INTERMEDIATE_SIZE, HIDDEN_SIZE, bias=False)

    def forward(self, hidden_states):
        input, gate = self.Wi(hidden_states).chunk(2, dim=-1)
        return self.Wo(self.drop(self.act(input) * gate))


class ModernBertEncoderLayer(nn.Module):
    def __init__(self, layer_id):
        super().__init__()
        if layer_id == 0:
            self.attn_norm = nn.Identity()
        else:
            self.attn_norm = nn.LayerNorm(HIDDEN_SIZE, eps=NORM_EPS, bias=False)
        self.attn = ModernBertAttention(layer_id=layer_id)
        self.mlp_norm = nn.LayerNorm(HIDDEN_SIZE, eps=NORM_EPS, bias=False)
        self.mlp = ModernBertMLP()

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        sliding_window_mask=None,
        position_ids=None,
        output_attentions=False,
    ):
        attn_outputs = self.attn(
            self.attn_norm(hidden_states),
            attention_mask=attention_mask,
            sliding_window_mask=sliding_window_mask,
            position_ids=position_ids,
            output_attentions=output_attentions,
        )
        hidden_states = hidden_states + attn_outputs[0]
        mlp_output = self.mlp(self.mlp_norm(hidden_states))
        hidden_states = hidden_states + mlp_output

        return (hidden_states,) + attn_outputs[1:]  # add attentions if outputted


def _prepare_4d_attention_mask(mask, dtype, tgt_len=None):
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len
    expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted_mask = 1.0 - expanded_mask
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([ModernBertEncoderLayer(i) for i in LAYER_IDS])
        with torch.no_grad():  # trained norm weights
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.uniform_(0.5, 1.5)
        self.eval()

    def _update_attention_mask(self, attention_mask):
        global_attention_mask = _prepare_4d_attention_mask(attention_mask, torch.float32)

        # Create position indices
        rows = torch.arange(global_attention_mask.shape[2], device=attention_mask.device).unsqueeze(0)
        # Calculate distance between positions
        distance = torch.abs(rows - rows.T)

        # Create sliding window mask (1 for positions within window, 0 outside)
        window_mask = (distance <= LOCAL_ATTENTION // 2).unsqueeze(0).unsqueeze(0)
        # Combine with existing mask
        sliding_window_mask = global_attention_mask.masked_fill(
            window_mask.logical_not(), torch.finfo(torch.float32).min
        )

        return global_attention_mask, sliding_window_mask

    def forward(self, hidden_states, attention_mask):
        seqlen = hidden_states.shape[1]
        position_ids = torch.arange(seqlen, device=hidden_states.device).unsqueeze(0)
        attention_mask, sliding_window_mask = self._update_attention_mask(attention_mask)
        for encoder_layer in self.layers:
            layer_outputs = encoder_layer(
                hidden_states,
                attention_mask=attention_mask,
                sliding_window_mask=sliding_window_mask,
                position_ids=position_ids,
            )
            hidden_states = layer_outputs[0]
        return hidden_states


def get_inputs():
    hidden_states = torch.randn(BATCH, SEQ_LEN, HIDDEN_SIZE)
    lengths = torch.randint(SEQ_LEN // 3, SEQ_LEN + 1, (BATCH,))
    lengths[0] = SEQ_LEN
    attention_mask = (torch.arange(SEQ_LEN)[None, :] < lengths[:, None]).long()
    return [hidden_states, attention_mask]


def get_init_inputs():
    return []
