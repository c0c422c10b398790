"""BEiT-Large/16 at 384x384 (microsoft/beit-large-patch16-384): one transformer encoder layer of this
ViT-style image model, as Hugging Face transformers writes it in models/beit/modeling_beit.py
(BeitLayer). Pre-norm layer: LayerNorm (eps 1e-12) -> BeitSelfAttention (16 heads x 64, query and
value Linear with bias, key without bias; scores / sqrt(64) plus the layer's own learned relative
position bias, gathered from a ((2*24-1)^2 + 3) x 16 table with the relative_position_index buffer for
the 24x24 patch grid plus the [CLS] token, permuted to [heads, 577, 577]; softmax; context) ->
BeitSelfOutput dense -> layer scale lambda_1 -> residual -> LayerNorm -> BeitIntermediate (Linear
1024->4096 + exact GELU) -> BeitOutput (Linear 4096->1024) -> layer scale lambda_2 -> residual.
Drop-path and dropout are inactive in eval. The relative-position table and layer scales are
given trained-looking values (BEiT initialises them to zeros / 0.1).
Use case: ImageNet classification at 384x384, batch 16 images, 577 tokens (24x24 patches + CLS)."""

import math

import torch
import torch.nn as nn

HIDDEN_SIZE = 1024
NUM_HEADS = 16
INTERMEDIATE_SIZE = 4096
LAYER_NORM_EPS = 1e-12
LAYER_SCALE_INIT_VALUE = 0.1
INITIALIZER_RANGE = 0.02
IMAGE_SIZE, PATCH_SIZE = 384, 16
WINDOW = IMAGE_SIZE // PATCH_SIZE  # 24
SEQ_LEN = WINDOW * WINDOW + 1  # 577
BATCH = 16


class BeitRelativePositionBias(nn.Module):
    def __init__(self, window_size):
        super().__init__()
        self.window_size = window_size
        self.num_relative_distance = (2 * window_size[0] - 1) * (2 * window_size[1] - 1) + 3
        self.relative_position_bias_table = nn.Parameter(torch.zeros(self.num_relative_distance, NUM_HEADS))
        # cls to token & token 2 cls & cls to cls

        # get pair-wise relative position index for each token inside the window
        coords_h = torch.arange(window_size[0])
        coords_w = torch.arange(window_size[1])
        coords = torch.stack(torch.meshgrid([coords_h, coords_w], indexing="ij"))  # 2, Wh, Ww
        coords_flatten = torch.flatten(coords, 1)  # 2, Wh*Ww
        relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]  # 2, Wh*Ww, Wh*Ww
        relative_coords = relative_coords.permute(1, 2, 0).contiguous()  # Wh*Ww, Wh*Ww, 2
        relative_coords[:, :, 0] += window_size[0] - 1  # shift to start from 0
        relative_coords[:, :, 1] += window_size[1] - 1
        relative_coords[:, :, 0] *= 2 * window_size[1] - 1
        relative_position_index = torch.zeros(
            size=(window_size[0] * window_size[1] + 1,) * 2, dtype=relative_coords.dtype
        )
        relative_position_index[1:, 1:] = relative_coords.sum(-1)  # Wh*Ww, Wh*Ww
        relative_position_index[0, 0:] = self.num_relative_distance - 3
        relative_position_index[0:, 0] = self.num_relative_distance - 2
        relative_position_index[0, 0] = self.num_relative_distance - 1

        self.register_buffer("relative_position_index", relative_position_index, persistent=False)

    def forward(self):
        relative_position_bias = self.relative_position_bias_table[
            self.relative_position_index.view(-1)
        ].view(
            self.window_size[0] * self.window_size[1] + 1, self.window_size[0] * self.window_size[1] + 1, -1
        )  # Wh*Ww,Wh*Ww,nH

        return relative_position_bias.permute(2, 0, 1).contiguous()  # nH, Wh*Ww, Wh*Ww


class BeitSelfAttention(nn.Module):
    def __init__(self, window_size=None):
        super().__init__()
        self.num_attention_heads = NUM_HEADS
        self.attention_head_size = int(HIDDEN_SIZE / NUM_HEADS)
        self.all_head_size = self.num_attention_heads * self.attention_head_size

        self.query = nn.Linear(HIDDEN_SIZE, self.all_head_size)
        self.key = nn.Linear(HIDDEN_SIZE, self.all_head_size, bias=False)
        self.value = nn.Linear(HIDDEN_SIZE, self.all_head_size)

        self.dropout = nn.Dropout(0.0)

        if window_size:
            self.relative_position_bias = BeitRelativePositionBias(window_size=window_size)
        else:
            self.relative_position_bias = None

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(*new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, head_mask=None, relative_position_bias=None):
        mixed_query_layer = self.query(hidden_states)

        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        query_layer = self.transpose_for_scores(mixed_query_layer)

        # Take the dot product between "query" and "key" to get the raw attention scores.
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))

        attention_scores = attention_scores / math.sqrt(self.attention_head_size)

        # Add relative position bias if present.
        if self.relative_position_bias is not None:
            attention_scores = attention_scores + self.relative_position_bias().unsqueeze(0)

        # Add shared relative position bias if provided.
        if relative_position_bias is not None:
            attention_scores = attention_scores + relative_position_bias

        # Normalize the attention scores to probabilities.
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)

        # This is actually dropping out entire tokens to attend to, which might
        # seem a bit unusual, but is taken from the original Transformer paper.
        attention_probs = self.dropout(attention_probs)

        # Mask heads if we want to
        if head_mask is not None:
            attention_probs = attention_probs * head_mask

        context_layer = torch.matmul(attention_probs, value_layer)

        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        context_layer = context_layer.view(*new_context_layer_shape)
        return context_layer


class BeitSelfOutput(nn.Module):
    """The residual connection is defined in BeitLayer instead of here (as is the case with other models)."""

    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(HIDDEN_SIZE, HIDDEN_SIZE)
        self.dropout = nn.Dropout(0.0)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states


class BeitAttention(nn.Module):
    def __init__(self, window_size=None):
        super().__init__()
        self.attention = BeitSelfAttention(window_size=window_size)
        self.output = BeitSelfOutput()

    def forward(self, hidden_states, head_mask=None, relative_position_bias=None):
        self_outputs = self.attention(hidden_states, head_mask, relative_position_bias)
        attention_output = self.output(self_outputs, hidden_states)
        return attention_output


class BeitIntermediate(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(HIDDEN_SIZE, INTERMEDIATE_SIZE)
        self.intermediate_act_fn = nn.GELU()

    def forward(self, hidden_states):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.intermediate_act_fn(hidden_states)
        return hidden_states


class BeitOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(INTERMEDIATE_SIZE, HIDDEN_SIZE)
        self.dropout = nn.Dropout(0.0)

    def forward(self, hidden_states):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states


class BeitLayer(nn.Module):
    """This corresponds to the Block class in the timm implementation."""

    def __init__(self, window_size=None):
        super().__init__()
        self.attention = BeitAttention(window_size=window_size)
        self.intermediate = BeitIntermediate()
        self.output = BeitOutput()
        self.layernorm_before = nn.LayerNorm(HIDDEN_SIZE, eps=LAYER_NORM_EPS)
        self.drop_path = nn.Identity()
        self.layernorm_after = nn.LayerNorm(HIDDEN_SIZE, eps=LAYER_NORM_EPS)

        init_values = LAYER_SCALE_INIT_VALUE
        if init_values > 0:
            self.lambda_1 = nn.Parameter(init_values * torch.ones(HIDDEN_SIZE), requires_grad=True)
            self.lambda_2 = nn.Parameter(init_values * torch.ones(HIDDEN_SIZE), requires_grad=True)
        else:
            self.lambda_1, self.lambda_2 = None, None

    def forward(self, hidden_states, head_mask=None, relative_position_bias=None):
        attention_output = self.attention(
            self.layernorm_before(hidden_states),  # in BEiT, layernorm is applied before self-attention
            head_mask,
            relative_position_bias=relative_position_bias,
        )

        # apply lambda_1 if present
        if self.lambda_1 is not None:
            attention_output = self.lambda_1 * attention_output

        # first residual connection
        hidden_states = self.drop_path(attention_output) + hidden_states

        # in BEiT, layernorm is also applied after self-attention
        layer_output = self.layernorm_after(hidden_states)

        layer_output = self.intermediate(layer_output)
        layer_output = self.output(layer_output)

        if self.lambda_2 is not None:
            layer_output = self.lambda_2 * layer_output

        # second residual connection
        layer_output = self.drop_path(layer_output) + hidden_states

        return layer_output


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = BeitLayer(window_size=(WINDOW, WINDOW))  # use_relative_position_bias=True
        with torch.no_grad():
            for m in self.modules():  # BeitPreTrainedModel._init_weights
                if isinstance(m, nn.Linear):
                    m.weight.normal_(mean=0.0, std=INITIALIZER_RANGE)
                    if m.bias is not None:
                        m.bias.zero_()
                elif isinstance(m, nn.LayerNorm):
                    m.bias.zero_()
                    m.weight.fill_(1.0)
            # trained-looking relative position table and layer scales
            self.layer.attention.attention.relative_position_bias.relative_position_bias_table.normal_(
                0.0, 1.0
            )
            self.layer.lambda_1.uniform_(0.05, 0.3)
            self.layer.lambda_2.uniform_(0.05, 0.3)
        self.eval()

    def forward(self, hidden_states):
        return self.layer(hidden_states)


def get_inputs():
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN_SIZE)]


def get_init_inputs():
    return []
