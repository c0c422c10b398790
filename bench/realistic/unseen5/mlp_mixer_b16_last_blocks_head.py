"""The end of MLP-Mixer-B/16 (mixer_b16_224) as timm writes it (MlpMixer): its last two
MixerBlocks, then the final norm, the average pool over tokens (forward_head with global_pool
'avg': x.mean(dim=1)) and the 1000-class head. A MixerBlock is token mixing (LayerNorm eps 1e-6,
transpose, Mlp over the 196 patches: fc1 196 -> 384, exact GELU, fc2 384 -> 196, transpose
back, residual) then channel mixing (LayerNorm, Mlp 768 -> 3072 -> 768, residual). Batch 8
images at 224 x 224 (14 x 14 patches of 16 pixels, 768 channels; a vision block with no
attention and no convolution, inference: no drop path)."""

from functools import partial

import torch
import torch.nn as nn

EMBED_DIM, SEQ_LEN, NUM_CLASSES, MLP_RATIO = 768, 196, 1000, (0.5, 4.0)
NUM_BLOCKS_SHOWN = 2
BATCH = 8


def to_2tuple(x):
    if isinstance(x, tuple):
        return x
    return (x, x)


class Mlp(nn.Module):
    """MLP as used in Vision Transformer, MLP-Mixer and related networks"""

    def __init__(
        self,
        in_features,
        hidden_features=None,
        out_features=None,
        act_layer=nn.GELU,
        norm_layer=None,
        bias=True,
        drop=0.0,
    ):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        bias = to_2tuple(bias)
        drop_probs = to_2tuple(drop)

        self.fc1 = nn.Linear(in_features, hidden_features, bias=bias[0])
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop_probs[0])
        self.norm = norm_layer(hidden_features) if norm_layer is not None else nn.Identity()
        self.fc2 = nn.Linear(hidden_features, out_features, bias=bias[1])
        self.drop2 = nn.Dropout(drop_probs[1])

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop1(x)
        x = self.norm(x)
        x = self.fc2(x)
        x = self.drop2(x)
        return x


class MixerBlock(nn.Module):
    """Residual Block w/ token mixing and channel MLPs
    Based on: 'MLP-Mixer: An all-MLP Architecture for Vision' - https://arxiv.org/abs/2105.01601
    """

    def __init__(
        self,
        dim,
        seq_len,
        mlp_ratio=(0.5, 4.0),
        mlp_layer=Mlp,
        norm_layer=partial(nn.LayerNorm, eps=1e-6),
        act_layer=nn.GELU,
        drop=0.0,
        drop_path=0.0,
    ):
        super().__init__()
        tokens_dim, channels_dim = (int(x * dim) for x in to_2tuple(mlp_ratio))
        self.norm1 = norm_layer(dim)
        self.mlp_tokens = mlp_layer(seq_len, tokens_dim, act_layer=act_layer, drop=drop)
        self.drop_path = nn.Identity()  # DropPath(drop_path) if drop_path > 0. else nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp_channels = mlp_layer(dim, channels_dim, act_layer=act_layer, drop=drop)

    def forward(self, x):
        x = x + self.drop_path(self.mlp_tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2))
        x = x + self.drop_path(self.mlp_channels(self.norm2(x)))
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        norm_layer = partial(nn.LayerNorm, eps=1e-6)
        self.global_pool = "avg"
        self.blocks = nn.Sequential(
            *[
                MixerBlock(
                    EMBED_DIM, SEQ_LEN, MLP_RATIO, mlp_layer=Mlp, norm_layer=norm_layer, act_layer=nn.GELU
                )
                for _ in range(NUM_BLOCKS_SHOWN)
            ]
        )
        self.norm = norm_layer(EMBED_DIM)
        self.head_drop = nn.Dropout(0.0)
        self.head = nn.Linear(EMBED_DIM, NUM_CLASSES)
        with torch.no_grad():  # trained norms
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.1, 0.1)
        self.eval()

    def forward_head(self, x, pre_logits: bool = False):
        if self.global_pool == "avg":
            x = x.mean(dim=1)
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, x):
        # the tail of forward_features (blocks[10:], norm), then forward_head
        x = self.blocks(x)
        x = self.norm(x)
        x = self.forward_head(x)
        return x


def get_inputs():
    return [torch.randn(BATCH, SEQ_LEN, EMBED_DIM)]


def get_init_inputs():
    return []
