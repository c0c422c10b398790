"""wav2vec 2.0 base's (and HuBERT base's) path from the convolutional features into the
transformer, as transformers writes it: Wav2Vec2FeatureProjection (LayerNorm over the 512 conv
channels, eps 1e-5, Linear 512 -> 768), then Wav2Vec2Encoder's convolutional relative position
embedding (Wav2Vec2PositionalConvEmbedding: a grouped Conv1d 768 -> 768, kernel 128, padding
64, 16 groups of 48 channels, its weight under weight_norm over dim 2, i.e. recomputed from g and
v at every forward by the parametrization; Wav2Vec2SamePadLayer drops the last frame; exact
GELU), added to the projected features, then the encoder's LayerNorm (eps 1e-5). Batch 4 clips
of 10 s at 16 kHz = 499 frames of 20 ms (a speech encoder; audio)."""

import torch
import torch.nn as nn

CONV_DIM, HIDDEN, KERNEL, GROUPS, EPS = 512, 768, 128, 16, 1e-5
BATCH, FRAMES = 4, 499


class Wav2Vec2FeatureProjection(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer_norm = nn.LayerNorm(CONV_DIM, eps=EPS)
        self.projection = nn.Linear(CONV_DIM, HIDDEN)

    def forward(self, hidden_states):
        # non-projected hidden states are needed for quantization
        norm_hidden_states = self.layer_norm(hidden_states)
        hidden_states = self.projection(norm_hidden_states)
        return hidden_states, norm_hidden_states


class Wav2Vec2SamePadLayer(nn.Module):
    def __init__(self, num_conv_pos_embeddings):
        super().__init__()
        self.num_pad_remove = 1 if num_conv_pos_embeddings % 2 == 0 else 0

    def forward(self, hidden_states):
        if self.num_pad_remove > 0:
            hidden_states = hidden_states[:, :, : -self.num_pad_remove]
        return hidden_states


class Wav2Vec2PositionalConvEmbedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(HIDDEN, HIDDEN, kernel_size=KERNEL, padding=KERNEL // 2, groups=GROUPS)
        self.conv = nn.utils.parametrizations.weight_norm(self.conv, name="weight", dim=2)
        self.padding = Wav2Vec2SamePadLayer(KERNEL)
        self.activation = nn.GELU()

    def forward(self, hidden_states):
        hidden_states = hidden_states.transpose(1, 2)
        hidden_states = self.conv(hidden_states)
        hidden_states = self.padding(hidden_states)
        hidden_states = self.activation(hidden_states)
        hidden_states = hidden_states.transpose(1, 2)
        return hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.feature_projection = Wav2Vec2FeatureProjection()
        self.pos_conv_embed = Wav2Vec2PositionalConvEmbedding()
        self.layer_norm = nn.LayerNorm(HIDDEN, eps=EPS)

    def forward(self, extract_features):
        # Wav2Vec2Model.forward: extract_features is the feature encoder's output transposed to (B, T, 512)
        hidden_states, extract_features = self.feature_projection(extract_features)
        # Wav2Vec2Encoder.forward (no attention mask for the base model), up to the first layer
        position_embeddings = self.pos_conv_embed(hidden_states)
        hidden_states = hidden_states + position_embeddings
        hidden_states = self.layer_norm(hidden_states)
        return hidden_states


def get_inputs():
    # the feature encoder ends with GELU
    return [torch.nn.functional.gelu(torch.randn(BATCH, FRAMES, CONV_DIM))]


def get_init_inputs():
    return []
