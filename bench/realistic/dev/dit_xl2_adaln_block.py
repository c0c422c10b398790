"""DiT-XL/2 (Peebles & Xie, "Scalable Diffusion Models with Transformers") conditioning
embedders + one DiT transformer block with adaLN-Zero modulation, following the
official facebookresearch/DiT repo, models.py (TimestepEmbedder, LabelEmbedder,
modulate, DiTBlock) with timm's Attention and Mlp as that code imports them
(timm.models.vision_transformer, non-fused attention path).

A ViT-style diffusion transformer block: LayerNorm without affine, shift/scale/gate
from an SiLU+Linear adaLN modulation of the conditioning vector c = t_emb + y_emb,
16-head self-attention (hidden 1152, head dim 72) and a 4x GELU(tanh) MLP, each gated
and residual. Use case: class-conditional ImageNet 256x256 sampling with
classifier-free guidance: 16 images x 2 (conditional + null label 1000) = batch 32,
latent 32x32x4 patchified with p=2 -> 256 tokens of width 1152.
Inputs: tokens (32, 256, 1152) after x_embedder + pos_embed, timesteps t (32,),
labels y (32,). Output (32, 256, 1152). Rough cost: ~270 GFLOP.

Departures: DiT initialises the adaLN modulation Linear to zero (adaLN-Zero), which
makes an untrained block the identity; here its weight is normal(0, 0.2) with zero
bias, scaled so that shift/scale/gate come out O(0.3) and the block is non-trivial
(as after training). Other init as DiT's
initialize_weights (xavier_uniform Linear, zero bias; timestep MLP normal(0, 0.02);
label table normal(0, 0.02)). Only one of the 28 blocks is included.
"""

import math

import torch
import torch.nn as nn

BATCH = 32
NUM_TOKENS = 256
HIDDEN = 1152
NUM_HEADS = 16
MLP_RATIO = 4.0
NUM_CLASSES = 1000
CLASS_DROPOUT_PROB = 0.1
FREQ_EMB_SIZE = 256
ADALN_INIT_STD = 0.2


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden_size, frequency_embedding_size=256):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(frequency_embedding_size, hidden_size, bias=True),
            nn.SiLU(),
            nn.Linear(hidden_size, hidden_size, bias=True),
        )
        self.frequency_embedding_size = frequency_embedding_size

    @staticmethod
    def timestep_embedding(t, dim, max_period=10000):
        half = dim // 2
        freqs = torch.exp(
            -math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half
        ).to(device=t.device)
        args = t[:, None].float() * freqs[None]
        embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        if dim % 2:
            embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
        return embedding

    def forward(self, t):
        t_freq = self.timestep_embedding(t, self.frequency_embedding_size)
        t_emb = self.mlp(t_freq)
        return t_emb


class LabelEmbedder(nn.Module):
    def __init__(self, num_classes, hidden_size, dropout_prob):
        super().__init__()
        use_cfg_embedding = dropout_prob > 0
        self.embedding_table = nn.Embedding(num_classes + use_cfg_embedding, hidden_size)
        self.num_classes = num_classes
        self.dropout_prob = dropout_prob

    def token_drop(self, labels, force_drop_ids=None):
        if force_drop_ids is None:
            drop_ids = torch.rand(labels.shape[0], device=labels.device) < self.dropout_prob
        else:
            drop_ids = force_drop_ids == 1
        labels = torch.where(drop_ids, self.num_classes, labels)
        return labels

    def forward(self, labels, train, force_drop_ids=None):
        use_dropout = self.dropout_prob > 0
        if (train and use_dropout) or (force_drop_ids is not None):
            labels = self.token_drop(labels, force_drop_ids)
        embeddings = self.embedding_table(labels)
        return embeddings


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU, drop=0.0):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_features, out_features)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop1(x)
        x = self.fc2(x)
        x = self.drop2(x)
        return x


class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        assert dim % num_heads == 0, "dim should be divisible by num_heads"
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class DiTBlock(nn.Module):
    def __init__(self, hidden_size, num_heads, mlp_ratio=4.0, **block_kwargs):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden_size, num_heads=num_heads, qkv_bias=True, **block_kwargs)
        self.norm2 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        mlp_hidden_dim = int(hidden_size * mlp_ratio)
        approx_gelu = lambda: nn.GELU(approximate="tanh")  # noqa: E731
        self.mlp = Mlp(in_features=hidden_size, hidden_features=mlp_hidden_dim, act_layer=approx_gelu, drop=0)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 6 * hidden_size, bias=True))

    def forward(self, x, c):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaLN_modulation(c).chunk(
            6, dim=1
        )
        x = x + gate_msa.unsqueeze(1) * self.attn(modulate(self.norm1(x), shift_msa, scale_msa))
        x = x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.t_embedder = TimestepEmbedder(HIDDEN, FREQ_EMB_SIZE)
        self.y_embedder = LabelEmbedder(NUM_CLASSES, HIDDEN, CLASS_DROPOUT_PROB)
        self.blocks = nn.ModuleList([DiTBlock(HIDDEN, NUM_HEADS, mlp_ratio=MLP_RATIO)])
        self.initialize_weights()
        self.eval()

    def initialize_weights(self):
        def _basic_init(module):
            if isinstance(module, nn.Linear):
                torch.nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.constant_(module.bias, 0)

        self.apply(_basic_init)
        nn.init.normal_(self.y_embedder.embedding_table.weight, std=0.02)
        nn.init.normal_(self.t_embedder.mlp[0].weight, std=0.02)
        nn.init.normal_(self.t_embedder.mlp[2].weight, std=0.02)
        for block in self.blocks:
            # DiT: nn.init.constant_(block.adaLN_modulation[-1].weight, 0) -- see docstring
            nn.init.normal_(block.adaLN_modulation[-1].weight, std=ADALN_INIT_STD)
            nn.init.constant_(block.adaLN_modulation[-1].bias, 0)

    def forward(self, x, t, y):
        t = self.t_embedder(t)  # (N, D)
        y = self.y_embedder(y, self.training)  # (N, D)
        c = t + y  # (N, D)
        for block in self.blocks:
            x = block(x, c)  # (N, T, D)
        return x


def get_inputs():
    x = torch.randn(BATCH, NUM_TOKENS, HIDDEN)
    t = torch.full((BATCH,), 500, dtype=torch.long)
    y_cond = torch.randint(0, NUM_CLASSES, (BATCH // 2,))
    y_null = torch.full((BATCH // 2,), NUM_CLASSES, dtype=torch.long)
    y = torch.cat([y_cond, y_null], 0)
    return [x, t, y]


def get_init_inputs():
    return []
