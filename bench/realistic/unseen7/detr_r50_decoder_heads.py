"""DETR-R50's transformer decoder and prediction heads as facebookresearch/detr writes them
(models/transformer.py, models/position_encoding.py, models/detr.py): the sine positional encoding
built from the padding mask (PositionEmbeddingSine(128, normalize=True): cumsum over not_mask,
normalised to 2*pi, sin/cos interleaved with stack+flatten), the flatten/permute to sequence-first
layout, 100 learned object queries repeated over the batch, a zero tgt, and 6 post-norm
TransformerDecoderLayers (nn.MultiheadAttention self-attention on queries + query_pos,
cross-attention to the 850-ish memory tokens + pos with key_padding_mask, FFN 256 -> 2048 -> 256
ReLU, LayerNorm after each) with return_intermediate=True and the shared decoder norm; then the
class head (Linear 256 -> 92) and box MLP (3 layers, sigmoid) applied to every decoder layer's
output (aux outputs). Input is the encoder memory (bs, 256, H/32, W/32) and the padding mask of a
batch of 8 images resized to shorter side 800 (padded to 800x1216 -> 25x38 map).
Use case: detection serving, batch 8."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

D_MODEL, NHEAD, DIM_FEEDFORWARD, NUM_DECODER_LAYERS = 256, 8, 2048, 6
NUM_QUERIES, NUM_CLASSES = 100, 91
BATCH, FEAT_H, FEAT_W = 8, 25, 38


class PositionEmbeddingSine(nn.Module):
    """
    This is a more standard version of the position embedding, very similar to the one
    used by the Attention is all you need paper, generalized to work on images.
    """

    def __init__(self, num_pos_feats=64, temperature=10000, normalize=False, scale=None):
        super().__init__()
        self.num_pos_feats = num_pos_feats
        self.temperature = temperature
        self.normalize = normalize
        if scale is not None and normalize is False:
            raise ValueError("normalize should be True if scale is passed")
        if scale is None:
            scale = 2 * math.pi
        self.scale = scale

    def forward(self, x, mask):
        assert mask is not None
        not_mask = ~mask
        y_embed = not_mask.cumsum(1, dtype=torch.float32)
        x_embed = not_mask.cumsum(2, dtype=torch.float32)
        if self.normalize:
            eps = 1e-6
            y_embed = y_embed / (y_embed[:, -1:, :] + eps) * self.scale
            x_embed = x_embed / (x_embed[:, :, -1:] + eps) * self.scale

        dim_t = torch.arange(self.num_pos_feats, dtype=torch.float32, device=x.device)
        dim_t = self.temperature ** (2 * (dim_t // 2) / self.num_pos_feats)

        pos_x = x_embed[:, :, :, None] / dim_t
        pos_y = y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos = torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)
        return pos


class TransformerDecoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.multihead_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        # Implementation of Feedforward model
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)

        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

        self.activation = F.relu

    def with_pos_embed(self, tensor, pos):
        return tensor if pos is None else tensor + pos

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        pos=None,
        query_pos=None,
    ):
        # forward_post (normalize_before=False)
        q = k = self.with_pos_embed(tgt, query_pos)
        tgt2 = self.self_attn(q, k, value=tgt, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask)[0]
        tgt = tgt + self.dropout1(tgt2)
        tgt = self.norm1(tgt)
        tgt2 = self.multihead_attn(
            query=self.with_pos_embed(tgt, query_pos),
            key=self.with_pos_embed(memory, pos),
            value=memory,
            attn_mask=memory_mask,
            key_padding_mask=memory_key_padding_mask,
        )[0]
        tgt = tgt + self.dropout2(tgt2)
        tgt = self.norm2(tgt)
        tgt2 = self.linear2(self.dropout(self.activation(self.linear1(tgt))))
        tgt = tgt + self.dropout3(tgt2)
        tgt = self.norm3(tgt)
        return tgt


class TransformerDecoder(nn.Module):
    def __init__(self, decoder_layer_args, num_layers, norm=None, return_intermediate=False):
        super().__init__()
        # DETR's _get_clones deep-copies one layer; fresh layers are equivalent (re-initialised below)
        self.layers = nn.ModuleList([TransformerDecoderLayer(*decoder_layer_args) for i in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm
        self.return_intermediate = return_intermediate

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        pos=None,
        query_pos=None,
    ):
        output = tgt

        intermediate = []

        for layer in self.layers:
            output = layer(
                output,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                pos=pos,
                query_pos=query_pos,
            )
            if self.return_intermediate:
                intermediate.append(self.norm(output))

        if self.norm is not None:
            output = self.norm(output)
            if self.return_intermediate:
                intermediate.pop()
                intermediate.append(output)

        if self.return_intermediate:
            return torch.stack(intermediate)

        return output.unsqueeze(0)


class MLP(nn.Module):
    """Very simple multi-layer perceptron (also called FFN)"""

    def __init__(self, input_dim, hidden_dim, output_dim, num_layers):
        super().__init__()
        self.num_layers = num_layers
        h = [hidden_dim] * (num_layers - 1)
        self.layers = nn.ModuleList(
            nn.Linear(n, k) for n, k in zip([input_dim] + h, h + [output_dim], strict=False)
        )

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = F.relu(layer(x)) if i < self.num_layers - 1 else layer(x)
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.position_embedding = PositionEmbeddingSine(D_MODEL // 2, normalize=True)
        decoder_layer = (D_MODEL, NHEAD, DIM_FEEDFORWARD, 0.1)
        decoder_norm = nn.LayerNorm(D_MODEL)
        self.decoder = TransformerDecoder(
            decoder_layer, NUM_DECODER_LAYERS, decoder_norm, return_intermediate=True
        )
        self.query_embed = nn.Embedding(NUM_QUERIES, D_MODEL)
        self.class_embed = nn.Linear(D_MODEL, NUM_CLASSES + 1)
        self.bbox_embed = MLP(D_MODEL, D_MODEL, 4, 3)
        with torch.no_grad():
            # Transformer._reset_parameters: xavier_uniform_ on every matrix of the transformer
            for p in self.decoder.parameters():
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)
            self.bbox_embed.layers[-1].weight.mul_(10.0)  # trained box regressor: boxes spread over the image
            for m in self.modules():  # trained LayerNorms
                if isinstance(m, nn.LayerNorm):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.1, 0.1)
        self.eval()

    def forward(self, src, mask):
        # Joiner: pos from the (already interpolated) padding mask
        pos_embed = self.position_embedding(src, mask).to(src.dtype)
        # Transformer.forward, decoder half (src is the encoder memory here)
        bs, c, h, w = src.shape
        memory = src.flatten(2).permute(2, 0, 1)
        pos_embed = pos_embed.flatten(2).permute(2, 0, 1)
        query_embed = self.query_embed.weight.unsqueeze(1).repeat(1, bs, 1)
        mask = mask.flatten(1)

        tgt = torch.zeros_like(query_embed)
        hs = self.decoder(tgt, memory, memory_key_padding_mask=mask, pos=pos_embed, query_pos=query_embed)
        hs = hs.transpose(1, 2)
        # DETR.forward heads (all decoder layers, as used for aux outputs)
        outputs_class = self.class_embed(hs)
        outputs_coord = self.bbox_embed(hs).sigmoid()
        return outputs_class, outputs_coord


def get_inputs():
    src = torch.randn(BATCH, D_MODEL, FEAT_H, FEAT_W)
    valid_h = torch.randint(FEAT_H * 3 // 4, FEAT_H + 1, (BATCH,))
    valid_w = torch.randint(FEAT_W // 2, FEAT_W + 1, (BATCH,))
    valid_h[0], valid_w[0] = FEAT_H, FEAT_W  # the image that sets the padded size
    rows = torch.arange(FEAT_H)[None, :, None]
    cols = torch.arange(FEAT_W)[None, None, :]
    mask = (rows >= valid_h[:, None, None]) | (cols >= valid_w[:, None, None])
    return [src, mask]


def get_init_inputs():
    return []
