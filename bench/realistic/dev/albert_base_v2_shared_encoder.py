"""ALBERT-base-v2's whole encoder as transformers writes it (AlbertTransformer): the factorised
embedding's projection embedding_hidden_mapping_in (Linear 128 -> 768), then ONE AlbertLayer
whose weights are shared by all 12 layers (num_hidden_groups 1, inner_group_num 1), applied 12
times: AlbertAttention (query/key/value Linear 768 -> 768 viewed as 12 heads of 64, the eager
attention written out: matmul(query, key^T) * 1/8, the BERT-style additive padding mask
(1 - mask) * finfo.min, softmax, matmul with value, the dense projection, residual and
LayerNorm, eps 1e-12), then the feed-forward ffn 768 -> 3072, gelu_new (the tanh
approximation), ffn_output 3072 -> 768, residual and full_layer_layer_norm. Input is the
embedding output (width 128) for a batch of 4 x 128-token GLUE-style sentences, right-padded
(an NLP encoder; dropout inactive in inference)."""

import math

import torch
import torch.nn as nn

EMBEDDING_SIZE, HIDDEN, N_HEAD, INTERMEDIATE, EPS = 128, 768, 12, 3072, 1e-12
NUM_HIDDEN_LAYERS, NUM_HIDDEN_GROUPS, INNER_GROUP_NUM = 12, 1, 1
BATCH, LENGTH = 4, 128


class NewGELUActivation(nn.Module):
    """gelu_new: the tanh approximation of GELU, as in Google BERT and OpenAI GPT."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return (
            0.5
            * input
            * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))
        )


def eager_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0):
    if scaling is None:
        scaling = query.size(-1) ** -0.5

    # Take the dot product between "query" and "key" to get the raw attention scores.
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling

    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask

    attn_weights = nn.functional.softmax(attn_weights, dim=-1)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)

    attn_output = torch.matmul(attn_weights, value)
    attn_output = attn_output.transpose(1, 2).contiguous()

    return attn_output, attn_weights


class AlbertAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_attention_heads = N_HEAD
        self.hidden_size = HIDDEN
        self.attention_head_size = HIDDEN // N_HEAD
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.scaling = self.attention_head_size**-0.5

        self.attention_dropout = nn.Dropout(0.0)
        self.output_dropout = nn.Dropout(0.0)

        self.query = nn.Linear(HIDDEN, self.all_head_size)
        self.key = nn.Linear(HIDDEN, self.all_head_size)
        self.value = nn.Linear(HIDDEN, self.all_head_size)
        self.dense = nn.Linear(HIDDEN, HIDDEN)

        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=EPS)

    def forward(self, hidden_states, attention_mask=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.attention_head_size)

        # get all proj
        query_layer = self.query(hidden_states).view(*hidden_shape).transpose(1, 2)
        key_layer = self.key(hidden_states).view(*hidden_shape).transpose(1, 2)
        value_layer = self.value(hidden_states).view(*hidden_shape).transpose(1, 2)

        attn_output, attn_weights = eager_attention_forward(
            self,
            query_layer,
            key_layer,
            value_layer,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout.p,
            scaling=self.scaling,
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()

        attn_output = self.dense(attn_output)
        attn_output = self.output_dropout(attn_output)
        attn_output = self.LayerNorm(hidden_states + attn_output)

        return attn_output, attn_weights


class AlbertLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.chunk_size_feed_forward = 0
        self.seq_len_dim = 1
        self.full_layer_layer_norm = nn.LayerNorm(HIDDEN, eps=EPS)
        self.attention = AlbertAttention()
        self.ffn = nn.Linear(HIDDEN, INTERMEDIATE)
        self.ffn_output = nn.Linear(INTERMEDIATE, HIDDEN)
        self.activation = NewGELUActivation()
        self.dropout = nn.Dropout(0.0)

    def forward(self, hidden_states, attention_mask=None):
        attention_output, _ = self.attention(hidden_states, attention_mask)

        # apply_chunking_to_forward with chunk_size_feed_forward 0 calls ff_chunk once
        ffn_output = self.ff_chunk(attention_output)
        hidden_states = self.full_layer_layer_norm(ffn_output + attention_output)
        return hidden_states

    def ff_chunk(self, attention_output: torch.Tensor) -> torch.Tensor:
        ffn_output = self.ffn(attention_output)
        ffn_output = self.activation(ffn_output)
        ffn_output = self.ffn_output(ffn_output)
        return ffn_output


class AlbertLayerGroup(nn.Module):
    def __init__(self):
        super().__init__()
        self.albert_layers = nn.ModuleList([AlbertLayer() for _ in range(INNER_GROUP_NUM)])

    def forward(self, hidden_states, attention_mask=None):
        for albert_layer in self.albert_layers:
            hidden_states = albert_layer(hidden_states, attention_mask)
        return hidden_states


class AlbertTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_hidden_layers = NUM_HIDDEN_LAYERS
        self.num_hidden_groups = NUM_HIDDEN_GROUPS
        self.embedding_hidden_mapping_in = nn.Linear(EMBEDDING_SIZE, HIDDEN)
        self.albert_layer_groups = nn.ModuleList([AlbertLayerGroup() for _ in range(NUM_HIDDEN_GROUPS)])

    def forward(self, hidden_states, attention_mask=None):
        hidden_states = self.embedding_hidden_mapping_in(hidden_states)

        for i in range(self.num_hidden_layers):
            # Index of the hidden group
            group_idx = int(i / (self.num_hidden_layers / self.num_hidden_groups))

            hidden_states = self.albert_layer_groups[group_idx](hidden_states, attention_mask)

        return hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = AlbertTransformer()
        with torch.no_grad():  # trained norms
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.1, 0.1)
        self.eval()

    def forward(self, embedding_output, attention_mask):
        # the extended attention mask AlbertModel builds from the tokenizer's 0/1 padding mask
        extended_attention_mask = attention_mask[:, None, None, :]
        extended_attention_mask = extended_attention_mask.to(dtype=embedding_output.dtype)
        extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(embedding_output.dtype).min
        return self.encoder(embedding_output, extended_attention_mask)


def get_inputs():
    lengths = torch.randint(48, LENGTH + 1, (BATCH,))
    lengths[0] = LENGTH
    attention_mask = (torch.arange(LENGTH)[None, :] < lengths[:, None]).long()
    return [torch.randn(BATCH, LENGTH, EMBEDDING_SIZE), attention_mask]


def get_init_inputs():
    return []
