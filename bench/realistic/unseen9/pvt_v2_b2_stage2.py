"""PVT v2-b2 (Pyramid Vision Transformer v2) stage 2, following timm
timm/models/pvt_v2.py (OverlapPatchEmbed, Attention with spatial-reduction conv,
MlpWithDepthwiseConv, Block, PyramidVisionTransformerStage).

A pyramid of ViT-style pre-norm transformer blocks: the attention keys/values come
from a 4x4 stride-4 spatial-reduction conv + LayerNorm (sr_ratio 4), and the MLP has
a 3x3 depthwise conv between fc1 and fc2. Stage 2 of pvt_v2_b2: overlapping 3x3
stride-2 patch embedding 64 -> 128 channels, 4 blocks, 2 heads, mlp_ratio 8.
Shapes: input is the stage-1 output for 224x224 ImageNet evaluation, batch 32:
(32, 64, 56, 56) -> (32, 128, 28, 28). Rough cost: ~70 GFLOP.

Departures: none in the computation (timm's fused path, F.scaled_dot_product_attention,
is used). Weights follow timm's _init_weights (trunc_normal std 0.02 for Linear,
fan-out normal for Conv2d, zero biases); drop_path / dropout are 0.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 32
IN_DIM = 64
DIM = 128
IN_H = 56
IN_W = 56
DEPTH = 4
NUM_HEADS = 2
SR_RATIO = 4
MLP_RATIO = 8.0
LN_EPS = 1e-6


class MlpWithDepthwiseConv(nn.Module):
    def __init__(
        self,
        in_features,
        hidden_features=None,
        out_features=None,
        act_layer=nn.GELU,
        drop=0.0,
        extra_relu=False,
    ):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.relu = nn.ReLU() if extra_relu else nn.Identity()
        self.dwconv = nn.Conv2d(hidden_features, hidden_features, 3, 1, 1, bias=True, groups=hidden_features)
        self.act = act_layer()
        self.fc2 = nn.Linear(hidden_features, out_features)
        self.drop = nn.Dropout(drop)

    def forward(self, x, feat_size):
        x = self.fc1(x)
        B, N, C = x.shape
        x = x.transpose(1, 2).view(B, C, feat_size[0], feat_size[1])
        x = self.relu(x)
        x = self.dwconv(x)
        x = x.flatten(2).transpose(1, 2)
        x = self.act(x)
        x = self.drop(x)
        x = self.fc2(x)
        x = self.drop(x)
        return x


class Attention(nn.Module):
    def __init__(
        self, dim, num_heads=8, sr_ratio=1, linear_attn=False, qkv_bias=True, attn_drop=0.0, proj_drop=0.0
    ):
        super().__init__()
        assert dim % num_heads == 0
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, dim * 2, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.pool = None
        self.act = None
        if sr_ratio > 1:
            self.sr = nn.Conv2d(dim, dim, kernel_size=sr_ratio, stride=sr_ratio)
            self.norm = nn.LayerNorm(dim, eps=LN_EPS)
        else:
            self.sr = None
            self.norm = None

    def forward(self, x, feat_size):
        B, N, C = x.shape
        H, W = feat_size
        q = self.q(x).reshape(B, N, self.num_heads, -1).permute(0, 2, 1, 3)

        if self.sr is not None:
            x = x.permute(0, 2, 1).reshape(B, C, H, W)
            x = self.sr(x).reshape(B, C, -1).permute(0, 2, 1)
            x = self.norm(x)
            kv = self.kv(x).reshape(B, -1, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        else:
            kv = self.kv(x).reshape(B, -1, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        k, v = kv.unbind(0)

        x = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p if self.training else 0.0)

        x = x.transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0, sr_ratio=1, linear_attn=False, qkv_bias=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=LN_EPS)
        self.attn = Attention(
            dim, num_heads=num_heads, sr_ratio=sr_ratio, linear_attn=linear_attn, qkv_bias=qkv_bias
        )
        self.drop_path1 = nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=LN_EPS)
        self.mlp = MlpWithDepthwiseConv(
            in_features=dim, hidden_features=int(dim * mlp_ratio), act_layer=nn.GELU, extra_relu=linear_attn
        )
        self.drop_path2 = nn.Identity()

    def forward(self, x, feat_size):
        x = x + self.drop_path1(self.attn(self.norm1(x), feat_size))
        x = x + self.drop_path2(self.mlp(self.norm2(x), feat_size))
        return x


class OverlapPatchEmbed(nn.Module):
    def __init__(self, patch_size=7, stride=4, in_chans=3, embed_dim=768):
        super().__init__()
        patch_size = (patch_size, patch_size)
        self.patch_size = patch_size
        self.proj = nn.Conv2d(
            in_chans, embed_dim, patch_size, stride=stride, padding=(patch_size[0] // 2, patch_size[1] // 2)
        )
        self.norm = nn.LayerNorm(embed_dim)

    def forward(self, x):
        x = self.proj(x)
        x = x.permute(0, 2, 3, 1)
        x = self.norm(x)
        return x


class PyramidVisionTransformerStage(nn.Module):
    def __init__(
        self,
        dim,
        dim_out,
        depth,
        downsample=True,
        num_heads=8,
        sr_ratio=1,
        linear_attn=False,
        mlp_ratio=4.0,
        qkv_bias=True,
    ):
        super().__init__()
        if downsample:
            self.downsample = OverlapPatchEmbed(patch_size=3, stride=2, in_chans=dim, embed_dim=dim_out)
        else:
            self.downsample = None
        self.blocks = nn.ModuleList(
            [
                Block(
                    dim=dim_out,
                    num_heads=num_heads,
                    sr_ratio=sr_ratio,
                    linear_attn=linear_attn,
                    mlp_ratio=mlp_ratio,
                    qkv_bias=qkv_bias,
                )
                for i in range(depth)
            ]
        )
        self.norm = nn.LayerNorm(dim_out, eps=LN_EPS)

    def forward(self, x):
        if self.downsample is not None:
            x = self.downsample(x)
        B, H, W, C = x.shape
        feat_size = (H, W)
        x = x.reshape(B, -1, C)
        for blk in self.blocks:
            x = blk(x, feat_size)
        x = self.norm(x)
        x = x.reshape(B, feat_size[0], feat_size[1], -1).permute(0, 3, 1, 2).contiguous()
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.stage = PyramidVisionTransformerStage(
            IN_DIM,
            DIM,
            DEPTH,
            downsample=True,
            num_heads=NUM_HEADS,
            sr_ratio=SR_RATIO,
            mlp_ratio=MLP_RATIO,
            qkv_bias=True,
        )
        self.apply(self._init_weights)
        self.eval()

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.Conv2d):
            fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
            fan_out //= m.groups
            m.weight.data.normal_(0, math.sqrt(2.0 / fan_out))
            if m.bias is not None:
                m.bias.data.zero_()

    def forward(self, x):
        return self.stage(x)


def get_inputs():
    return [torch.randn(BATCH, IN_DIM, IN_H, IN_W)]


def get_init_inputs():
    return []
