"""EVA-02-B/14 at 448px (ViT) -- one transformer block: 2D-RoPE attention + SwiGLU MLP with sub-LayerNorm.

Model / block: EVA-02 Base ViT (eva02_base_patch14_448.mim_in22k_ft_in22k_in1k), an EvaBlock:
    x = x + Attn(LN1(x), rope)       q_proj (bias), k_proj (no bias), v_proj (bias), 12 heads x 64,
                                     2D axial rotary embedding (RotaryEmbeddingCat, interleaved "rot" convention,
                                     grid 32x32 rescaled to the 16x16 pre-training reference grid) applied to the
                                     1024 patch tokens only (the class token is left unrotated),
                                     eager softmax attention, proj.
    x = x + SwiGLU(LN2(x))           fc1_g / fc1_x (768 -> 2048), silu(gate) * x, LayerNorm(2048) ("scale_mlp"),
                                     fc2 (2048 -> 768).
Upstream code followed: timm timm/models/eva.py (EvaAttention with qkv_fused=False, EvaBlock, the eva02 configs),
timm/layers/mlp.py (SwiGLU), timm/layers/pos_embed_sincos.py (freq_bands, build_fourier_pos_embed,
build_rotary_pos_embed, RotaryEmbeddingCat, apply_rot_embed_cat, rot).
Use case: ImageNet-1k classification inference at 448x448 (patch 14 -> 32x32 = 1024 patches + 1 cls token).
Shapes: x [batch=16, tokens=1025, dim=768] fp32 -> [16, 1025, 768].
Rough FLOPs: q/k/v/proj 4*2*16400*768^2 = 77 GFLOP, SwiGLU 3*2*16400*768*2048 = 155 GFLOP,
attention 2*2*16*12*1025^2*64 = 52 GFLOP -> ~284 GFLOP (~6 ms at 50 TFLOP/s); attention matrix 807 MB fp32.

Departures:
- One block of the 12; the rotary table is precomputed in __init__ (timm caches it in RotaryEmbeddingCat and
  passes it to every block) - same values.
- Eager attention path (timm's fused_attn=False branch: q * scale, q @ k^T, softmax, @ v) instead of
  F.scaled_dot_product_attention.
- Init: linear weights normal(0, 0.02) as timm's trunc_normal (no per-layer rescale), biases 0.02 * normal,
  LayerNorm weights 1 + 0.1 * noise and biases 0.02 * noise (trained-looking instead of ones/zeros).
"""

import torch
import torch.nn as nn

BATCH = 16
IMG = 448
PATCH = 14
GRID = IMG // PATCH  # 32
REF_GRID = 16
DIM = 768
NUM_HEADS = 12
HEAD_DIM = DIM // NUM_HEADS
MLP_HIDDEN = int(DIM * 4 * 2 / 3)  # 2048
NUM_PREFIX = 1


# ---- rotary embedding (timm pos_embed_sincos.py) ----
def freq_bands(num_bands, temperature=10000.0, step=2):
    exp = torch.arange(0, num_bands, step, dtype=torch.int64).to(torch.float32) / num_bands
    bands = 1.0 / (temperature**exp)
    return bands


def build_fourier_pos_embed(feat_shape, bands, ref_feat_shape=None):
    t = [torch.arange(s, dtype=torch.int64).to(torch.float32) for s in feat_shape]
    if ref_feat_shape is not None:
        # eva's scheme for resizing rope embeddings (ref shape = pretrain)
        t = [x / f * r for x, f, r in zip(t, feat_shape, ref_feat_shape, strict=False)]
    grid = torch.stack(torch.meshgrid(t, indexing="ij"), dim=-1)
    grid = grid.unsqueeze(-1)
    pos = grid * bands
    pos_sin, pos_cos = pos.sin(), pos.cos()
    return pos_sin, pos_cos


def build_rotary_pos_embed(feat_shape, dim, temperature=10000.0, ref_feat_shape=None):
    bands = freq_bands(dim // 4, temperature=temperature, step=1)
    sin_emb, cos_emb = build_fourier_pos_embed(feat_shape, bands, ref_feat_shape=ref_feat_shape)
    num_spatial_dim = 1
    for x in feat_shape:
        num_spatial_dim *= x
    sin_emb = sin_emb.reshape(num_spatial_dim, -1).repeat_interleave(2, -1)
    cos_emb = cos_emb.reshape(num_spatial_dim, -1).repeat_interleave(2, -1)
    return sin_emb, cos_emb


def rot(x):
    return torch.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)


def apply_rot_embed_cat(x, emb):
    sin_emb, cos_emb = emb.tensor_split(2, -1)
    if sin_emb.ndim == 3:
        return x * cos_emb.unsqueeze(1).expand_as(x) + rot(x) * sin_emb.unsqueeze(1).expand_as(x)
    return x * cos_emb + rot(x) * sin_emb


# ---- EVA block (timm eva.py) ----
class EvaAttention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=True, num_prefix_tokens=1):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        all_head_dim = head_dim * self.num_heads
        self.scale = head_dim**-0.5
        self.num_prefix_tokens = num_prefix_tokens
        # qkv_fused=False for the eva02 models
        self.q_proj = nn.Linear(dim, all_head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(dim, all_head_dim, bias=False)
        self.v_proj = nn.Linear(dim, all_head_dim, bias=qkv_bias)
        self.norm = nn.Identity()
        self.proj = nn.Linear(all_head_dim, dim)

    def forward(self, x, rope=None):
        B, N, C = x.shape
        q = self.q_proj(x).reshape(B, N, self.num_heads, -1).transpose(1, 2)  # B, num_heads, N, C
        k = self.k_proj(x).reshape(B, N, self.num_heads, -1).transpose(1, 2)
        v = self.v_proj(x).reshape(B, N, self.num_heads, -1).transpose(1, 2)

        if rope is not None:
            npt = self.num_prefix_tokens
            q = torch.cat([q[:, :, :npt, :], apply_rot_embed_cat(q[:, :, npt:, :], rope)], dim=2).type_as(v)
            k = torch.cat([k[:, :, :npt, :], apply_rot_embed_cat(k[:, :, npt:, :], rope)], dim=2).type_as(v)

        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x = attn @ v

        x = x.transpose(1, 2).reshape(B, N, C)
        x = self.norm(x)
        x = self.proj(x)
        return x


class SwiGLU(nn.Module):
    def __init__(self, in_features, hidden_features, norm_layer=None):
        super().__init__()
        self.fc1_g = nn.Linear(in_features, hidden_features)
        self.fc1_x = nn.Linear(in_features, hidden_features)
        self.act = nn.SiLU()
        self.norm = norm_layer(hidden_features) if norm_layer is not None else nn.Identity()
        self.fc2 = nn.Linear(hidden_features, in_features)

    def forward(self, x):
        x_gate = self.fc1_g(x)
        x = self.fc1_x(x)
        x = self.act(x_gate) * x
        x = self.norm(x)
        x = self.fc2(x)
        return x


class EvaBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_hidden):
        super().__init__()

        def norm_layer(d):
            return nn.LayerNorm(d, eps=1e-6)

        self.norm1 = norm_layer(dim)
        self.attn = EvaAttention(dim, num_heads=num_heads, qkv_bias=True, num_prefix_tokens=NUM_PREFIX)
        self.norm2 = norm_layer(dim)
        self.mlp = SwiGLU(dim, mlp_hidden, norm_layer=norm_layer)  # scale_mlp=True -> sub-LN

    def forward(self, x, rope=None):
        x = x + self.attn(self.norm1(x), rope=rope)
        x = x + self.mlp(self.norm2(x))
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = EvaBlock(DIM, NUM_HEADS, MLP_HIDDEN)
        sin_emb, cos_emb = build_rotary_pos_embed((GRID, GRID), HEAD_DIM, ref_feat_shape=(REF_GRID, REF_GRID))
        self.register_buffer("rope", torch.cat([sin_emb, cos_emb], -1), persistent=False)  # [1024, 128]
        with torch.no_grad():
            for mod in self.modules():
                if isinstance(mod, nn.Linear):
                    mod.weight.normal_(0.0, 0.02)
                    if mod.bias is not None:
                        mod.bias.normal_(0.0, 0.02)
                elif isinstance(mod, nn.LayerNorm):
                    mod.weight.copy_(1.0 + 0.1 * torch.randn_like(mod.weight))
                    mod.bias.normal_(0.0, 0.02)
        self.eval()

    def forward(self, x):
        return self.block(x, rope=self.rope)


def get_inputs():
    return [torch.randn(BATCH, GRID * GRID + NUM_PREFIX, DIM, dtype=torch.float32)]


def get_init_inputs():
    return []
