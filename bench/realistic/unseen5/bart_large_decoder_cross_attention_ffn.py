"""BART-large's decoder layer, its encoder-decoder half, as transformers 4.x writes it
(BartDecoderLayer after the self-attention sub-block, post-LayerNorm): encoder_attn, a
BartAttention in its bmm form (q_proj times 1/8 scaling; k_proj and v_proj over the 1024
encoder states; heads of 64 folded into the batch by _shape and view to [batch x 16, length,
64]; torch.bmm for the cross-attention scores; the expanded encoder padding mask from
_expand_mask (1 - mask, masked_fill with finfo.min) added through a view to [batch, 16, tgt,
src]; softmax; bmm with the values; out_proj), the residual add and encoder_attn_layer_norm;
then the feed-forward fc1 1024 -> 4096, exact GELU, fc2 4096 -> 1024, residual and
final_layer_norm (LayerNorm eps 1e-5). A teacher-forced scoring pass (BARTScore-style: the
likelihood of a 128-token summary under bart-large-cnn) over batch 4 articles of up to 1024
tokens, right-padded (an NLP encoder-decoder block; dropout inactive in inference)."""

import torch
import torch.nn as nn

D_MODEL, N_HEAD, FFN_DIM = 1024, 16, 4096
BATCH, TGT_LENGTH, SRC_LENGTH = 4, 128, 1024


def _expand_mask(mask: torch.Tensor, dtype: torch.dtype, tgt_len: int | None = None):
    """
    Expands attention_mask from `[bsz, seq_len]` to `[bsz, 1, tgt_seq_len, src_seq_len]`.
    """
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len

    expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)

    inverted_mask = 1.0 - expanded_mask

    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


class BartAttention(nn.Module):
    """Multi-headed attention from 'Attention Is All You Need' paper"""

    def __init__(self, embed_dim, num_heads, dropout=0.0, is_decoder=False, bias=True):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.head_dim = embed_dim // num_heads

        if (self.head_dim * num_heads) != self.embed_dim:
            raise ValueError(
                f"embed_dim must be divisible by num_heads (got `embed_dim`: {self.embed_dim}"
                f" and `num_heads`: {num_heads})."
            )
        self.scaling = self.head_dim**-0.5
        self.is_decoder = is_decoder

        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _shape(self, tensor: torch.Tensor, seq_len: int, bsz: int):
        return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(self, hidden_states, key_value_states=None, attention_mask=None):
        """Input shape: Batch x Time x Channel"""

        # if key_value_states are provided this layer is used as a cross-attention layer
        # for the decoder
        is_cross_attention = key_value_states is not None

        bsz, tgt_len, _ = hidden_states.size()

        # get query proj
        query_states = self.q_proj(hidden_states) * self.scaling
        if is_cross_attention:
            # cross_attentions
            key_states = self._shape(self.k_proj(key_value_states), -1, bsz)
            value_states = self._shape(self.v_proj(key_value_states), -1, bsz)
        else:
            # self_attention
            key_states = self._shape(self.k_proj(hidden_states), -1, bsz)
            value_states = self._shape(self.v_proj(hidden_states), -1, bsz)

        proj_shape = (bsz * self.num_heads, -1, self.head_dim)
        query_states = self._shape(query_states, tgt_len, bsz).view(*proj_shape)
        key_states = key_states.reshape(*proj_shape)
        value_states = value_states.reshape(*proj_shape)

        src_len = key_states.size(1)
        attn_weights = torch.bmm(query_states, key_states.transpose(1, 2))

        if attention_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len) + attention_mask
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)

        attn_weights = nn.functional.softmax(attn_weights, dim=-1)

        attn_probs = nn.functional.dropout(attn_weights, p=self.dropout, training=self.training)

        attn_output = torch.bmm(attn_probs, value_states)

        attn_output = attn_output.view(bsz, self.num_heads, tgt_len, self.head_dim)
        attn_output = attn_output.transpose(1, 2)

        # Use the `embed_dim` from the config (stored in the class) rather than `hidden_state` because `attn_output` can be
        # partitioned across GPUs when using tensor-parallelism.
        attn_output = attn_output.reshape(bsz, tgt_len, self.embed_dim)

        attn_output = self.out_proj(attn_output)

        return attn_output, None


class BartDecoderLayerCrossHalf(nn.Module):
    """BartDecoderLayer's encoder_attn and feed-forward sub-blocks (the self-attention ran before)."""

    def __init__(self):
        super().__init__()
        self.embed_dim = D_MODEL
        self.dropout = 0.1
        self.activation_fn = nn.GELU()
        self.activation_dropout = 0.0
        self.encoder_attn = BartAttention(self.embed_dim, N_HEAD, dropout=0.0, is_decoder=True)
        self.encoder_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self.fc1 = nn.Linear(self.embed_dim, FFN_DIM)
        self.fc2 = nn.Linear(FFN_DIM, self.embed_dim)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim)

    def forward(self, hidden_states, encoder_hidden_states, encoder_attention_mask):
        # Cross-Attention Block
        residual = hidden_states
        hidden_states, _ = self.encoder_attn(
            hidden_states=hidden_states,
            key_value_states=encoder_hidden_states,
            attention_mask=encoder_attention_mask,
        )
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states
        hidden_states = self.encoder_attn_layer_norm(hidden_states)

        # Fully Connected
        residual = hidden_states
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = nn.functional.dropout(
            hidden_states, p=self.activation_dropout, training=self.training
        )
        hidden_states = self.fc2(hidden_states)
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states
        hidden_states = self.final_layer_norm(hidden_states)
        return hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = BartDecoderLayerCrossHalf()
        with torch.no_grad():  # trained norms
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.1, 0.1)
        self.eval()

    def forward(self, hidden_states, encoder_hidden_states, attention_mask):
        # BartDecoder: expand the encoder's [bsz, seq_len] padding mask to [bsz, 1, tgt_seq_len, src_seq_len]
        encoder_attention_mask = _expand_mask(
            attention_mask, hidden_states.dtype, tgt_len=hidden_states.shape[1]
        )
        return self.layer(hidden_states, encoder_hidden_states, encoder_attention_mask)


def get_inputs():
    lengths = torch.randint(600, SRC_LENGTH + 1, (BATCH,))
    lengths[0] = SRC_LENGTH
    attention_mask = (torch.arange(SRC_LENGTH)[None, :] < lengths[:, None]).long()
    return [
        torch.randn(BATCH, TGT_LENGTH, D_MODEL),
        torch.randn(BATCH, SRC_LENGTH, D_MODEL),
        attention_mask,
    ]


def get_init_inputs():
    return []
