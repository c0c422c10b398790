"""A DINOv2 ViT-L/14 transformer block as facebookresearch/dinov2 writes it (layers/block.py
Block with MemEffAttention, which falls back to the plain Attention.forward when xFormers is
absent): norm1 (LayerNorm, eps 1e-6), attention written out by hand (one qkv Linear 1024 ->
3 x 1024 with bias, reshape to [3, B, 16 heads, N, 64] by permute, q * 64^-0.5, q @ k^T,
softmax, @ v, transpose and reshape, proj Linear), LayerScale ls1 (x * gamma), the residual
add; norm2, Mlp (fc1 1024 -> 4096, exact GELU, fc2 4096 -> 1024), LayerScale ls2, the residual
add. Batch 8 images at 224 x 224 (16 x 16 patches of 14 pixels + the class token = 257 tokens;
a vision block, inference: no drop path)."""

from functools import partial

import torch
import torch.nn as nn
from torch import Tensor

EMBED_DIM, NUM_HEADS, MLP_RATIO, EPS = 1024, 16, 4.0, 1e-6
BATCH, IMG_SIZE, PATCH_SIZE = 8, 224, 14
NUM_TOKENS = 1 + (IMG_SIZE // PATCH_SIZE) ** 2


class Attention(nn.Module):
    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        qkv_bias: bool = False,
        proj_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim**-0.5

        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: Tensor) -> Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)

        q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]
        attn = q @ k.transpose(-2, -1)

        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)

        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class MemEffAttention(Attention):
    def forward(self, x: Tensor, attn_bias=None) -> Tensor:
        # xFormers is not available: the plain attention
        if attn_bias is not None:
            raise AssertionError("xFormers is required for using nested tensors")
        return super().forward(x)


class Mlp(nn.Module):
    def __init__(
        self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU, drop=0.0, bias=True
    ):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features, bias=bias)
        self.act = act_layer()
        self.fc2 = nn.Linear(hidden_features, out_features, bias=bias)
        self.drop = nn.Dropout(drop)

    def forward(self, x: Tensor) -> Tensor:
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop(x)
        x = self.fc2(x)
        x = self.drop(x)
        return x


class LayerScale(nn.Module):
    def __init__(self, dim: int, init_values=1e-5, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return x.mul_(self.gamma) if self.inplace else x * self.gamma


class Block(nn.Module):
    def __init__(
        self,
        dim,
        num_heads,
        mlp_ratio=4.0,
        qkv_bias=False,
        proj_bias=True,
        ffn_bias=True,
        drop=0.0,
        attn_drop=0.0,
        init_values=None,
        drop_path=0.0,
        act_layer=nn.GELU,
        norm_layer=nn.LayerNorm,
        attn_class=Attention,
        ffn_layer=Mlp,
    ) -> None:
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = attn_class(
            dim,
            num_heads=num_heads,
            qkv_bias=qkv_bias,
            proj_bias=proj_bias,
            attn_drop=attn_drop,
            proj_drop=drop,
        )
        self.ls1 = LayerScale(dim, init_values=init_values) if init_values else nn.Identity()

        self.norm2 = norm_layer(dim)
        mlp_hidden_dim = int(dim * mlp_ratio)
        self.mlp = ffn_layer(
            in_features=dim,
            hidden_features=mlp_hidden_dim,
            act_layer=act_layer,
            drop=drop,
            bias=ffn_bias,
        )
        self.ls2 = LayerScale(dim, init_values=init_values) if init_values else nn.Identity()

        self.sample_drop_ratio = drop_path

    def forward(self, x: Tensor) -> Tensor:
        def attn_residual_func(x: Tensor) -> Tensor:
            return self.ls1(self.attn(self.norm1(x)))

        def ffn_residual_func(x: Tensor) -> Tensor:
            return self.ls2(self.mlp(self.norm2(x)))

        # inference (the training paths with stochastic depth are not taken)
        x = x + attn_residual_func(x)
        x = x + ffn_residual_func(x)
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block(
            EMBED_DIM,
            NUM_HEADS,
            mlp_ratio=MLP_RATIO,
            qkv_bias=True,
            proj_bias=True,
            ffn_bias=True,
            init_values=1.0,
            norm_layer=partial(nn.LayerNorm, eps=EPS),
            attn_class=MemEffAttention,
        )
        with torch.no_grad():  # trained norms and layer-scale values
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.1, 0.1)
                if isinstance(m, LayerScale):
                    m.gamma.uniform_(0.05, 1.0)
        self.eval()

    def forward(self, x):
        return self.block(x)


def get_inputs():
    return [torch.randn(BATCH, NUM_TOKENS, EMBED_DIM)]


def get_init_inputs():
    return []
