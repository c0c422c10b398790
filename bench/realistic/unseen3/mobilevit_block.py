"""MobileViT-S's first MobileViT block (timm's MobileVitBlock in stage 3 of mobilevit_s, a
hybrid conv/ViT model at its 256 x 256 input): local representation by a 3 x 3 Conv2d 96 -> 96 +
BatchNorm (eval) + SiLU and a 1 x 1 Conv2d 96 -> 144, the unfold of the 32 x 32 map into 2 x 2
patches (4 sequences of 256 tokens per image, the reshape/transpose dance timm writes), two
pre-norm ViT transformer blocks (timm's vision_transformer Block: LayerNorm, qkv Linear 144 -> 432
with bias, 4 heads of 36 through scaled_dot_product_attention, proj, LayerNorm, MLP 144 -> 288 ->
144 with SiLU, residuals), a final LayerNorm, the fold back to 32 x 32, a 1 x 1 Conv2d
144 -> 96 + BatchNorm + SiLU, and the fusion Conv2d 3 x 3 over the concatenated shortcut
(192 -> 96) + BatchNorm + SiLU; batch 32 (vision)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

IN_CHS, DIM, DEPTH, HEADS, PATCH, MLP_RATIO = 96, 144, 2, 4, 2, 2.0
BATCH, SIZE = 32, 32


class ConvNormAct(nn.Module):
    def __init__(self, in_chs, out_chs, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_chs, out_chs, kernel_size, padding=kernel_size // 2, bias=False)
        self.bn = nn.BatchNorm2d(out_chs)
        self.act = nn.SiLU()
        with torch.no_grad():  # trained statistics
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.2, 0.2)

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Attention(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.q_norm = nn.Identity()
        self.k_norm = nn.Identity()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0)
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.SiLU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class TransformerBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_kxk = ConvNormAct(IN_CHS, IN_CHS, 3)
        self.conv_1x1 = nn.Conv2d(IN_CHS, DIM, kernel_size=1, bias=False)
        self.transformer = nn.Sequential(*[TransformerBlock(DIM, HEADS, MLP_RATIO) for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(DIM)
        self.conv_proj = ConvNormAct(DIM, IN_CHS, 1)
        self.conv_fusion = ConvNormAct(IN_CHS + IN_CHS, IN_CHS, 3)
        self.patch_size = (PATCH, PATCH)
        self.patch_area = PATCH * PATCH

    def forward(self, x):
        shortcut = x

        # Local representation
        x = self.conv_kxk(x)
        x = self.conv_1x1(x)

        # Unfold (feature map -> patches)
        patch_h, patch_w = self.patch_size
        B, C, H, W = x.shape
        new_h, new_w = math.ceil(H / patch_h) * patch_h, math.ceil(W / patch_w) * patch_w
        num_patch_h, num_patch_w = new_h // patch_h, new_w // patch_w  # n_h, n_w
        num_patches = num_patch_h * num_patch_w  # N
        interpolate = False
        if new_h != H or new_w != W:
            x = F.interpolate(x, size=(new_h, new_w), mode="bilinear", align_corners=False)
            interpolate = True

        # [B, C, H, W] --> [B * C * n_h, n_w, p_h, p_w]
        x = x.reshape(B * C * num_patch_h, patch_h, num_patch_w, patch_w).transpose(1, 2)
        # [B * C * n_h, n_w, p_h, p_w] --> [BP, N, C] where P = p_h * p_w and N = n_h * n_w
        x = (
            x.reshape(B, C, num_patches, self.patch_area)
            .transpose(1, 3)
            .reshape(B * self.patch_area, num_patches, -1)
        )

        # Global representations
        x = self.transformer(x)
        x = self.norm(x)

        # Fold (patch -> feature map)
        x = x.contiguous().view(B, self.patch_area, num_patches, -1)
        x = x.transpose(1, 3).reshape(B * C * num_patch_h, num_patch_w, patch_h, patch_w)
        x = x.transpose(1, 2).reshape(B, C, num_patch_h * patch_h, num_patch_w * patch_w)
        if interpolate:
            x = F.interpolate(x, size=(H, W), mode="bilinear", align_corners=False)

        x = self.conv_proj(x)
        x = self.conv_fusion(torch.cat((shortcut, x), dim=1))
        return x


def get_inputs():
    return [torch.randn(BATCH, IN_CHS, SIZE, SIZE)]


def get_init_inputs():
    return []
