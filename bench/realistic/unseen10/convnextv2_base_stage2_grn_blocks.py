"""ConvNeXt V2-Base -- stage-2 downsampling layer plus the 3 ConvNeXt V2 blocks (with Global Response Normalization).

Model / block: ConvNeXt V2-Base (dims [128, 256, 512, 1024], depths [3, 3, 27, 3]), the transition into stage 2:
    downsample: LayerNorm(channels_first, eps 1e-6) -> Conv2d(128 -> 256, k=2, s=2)
    3 x Block: depthwise Conv2d 7x7 -> permute NHWC -> LayerNorm(eps 1e-6) -> Linear(256 -> 1024) -> GELU
               -> GRN(1024) -> Linear(1024 -> 256) -> permute NCHW -> residual add.
    GRN: Gx = ||x||_2 over (H, W) per channel; Nx = Gx / (mean_c Gx + 1e-6); y = gamma * (x * Nx) + beta + x.
Upstream code followed: facebookresearch/ConvNeXt-V2 models/convnextv2.py (Block, ConvNeXtV2.downsample_layers)
and models/utils.py (LayerNorm with channels_first / channels_last, GRN).
Use case: ImageNet classification inference at 224x224 (fine-tuned ConvNeXt V2-B), batch 64.
Shapes: input = stage-1 output [batch=64, 128, 56, 56] fp32 -> output [64, 256, 28, 28].
Rough FLOPs: downsample conv 2*64*784*256*512 = 13 GFLOP; per block pwconv1 + pwconv2 2*2*64*784*256*1024 = 52.6 GFLOP,
dwconv 2*64*784*256*49 = 1.3 GFLOP -> ~175 GFLOP total (~3.5 ms at 50 TFLOP/s); the 4x-expanded activation
[64, 28, 28, 1024] is 205 MB, so the GELU / GRN elementwise and reduction passes are memory-heavy too.

Departures:
- Only the stage-2 downsample + its 3 blocks, not the whole network; drop_path is identity (inference).
- Init: upstream uses trunc_normal(std=0.02) and zero GRN gamma/beta (training init), which makes every residual
  branch ~0; here conv/linear weights are normal(0, 1/sqrt(fan_in)) (pwconv2 and dwconv scaled by 0.5), biases
  0.02 * normal, LayerNorm weights 1 + 0.1 * noise, GRN gamma and beta 0.1 * normal, like trained values.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 64
IN_DIM = 128
DIM = 256
H = W = 56
DEPTH = 3


class LayerNorm(nn.Module):
    """LayerNorm that supports two data formats: channels_last (default) or channels_first."""

    def __init__(self, normalized_shape, eps=1e-6, data_format="channels_last"):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.eps = eps
        self.data_format = data_format
        if self.data_format not in ["channels_last", "channels_first"]:
            raise NotImplementedError
        self.normalized_shape = (normalized_shape,)

    def forward(self, x):
        if self.data_format == "channels_last":
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        elif self.data_format == "channels_first":
            u = x.mean(1, keepdim=True)
            s = (x - u).pow(2).mean(1, keepdim=True)
            x = (x - u) / torch.sqrt(s + self.eps)
            x = self.weight[:, None, None] * x + self.bias[:, None, None]
            return x


class GRN(nn.Module):
    """GRN (Global Response Normalization) layer"""

    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1, 1, 1, dim))
        self.beta = nn.Parameter(torch.zeros(1, 1, 1, dim))

    def forward(self, x):
        Gx = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
        Nx = Gx / (Gx.mean(dim=-1, keepdim=True) + 1e-6)
        return self.gamma * (x * Nx) + self.beta + x


class Block(nn.Module):
    """ConvNeXtV2 Block."""

    def __init__(self, dim):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)  # depthwise conv
        self.norm = LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)  # pointwise/1x1 convs, implemented with linear layers
        self.act = nn.GELU()
        self.grn = GRN(4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.drop_path = nn.Identity()

    def forward(self, x):
        input = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1)  # (N, C, H, W) -> (N, H, W, C)
        x = self.norm(x)
        x = self.pwconv1(x)
        x = self.act(x)
        x = self.grn(x)
        x = self.pwconv2(x)
        x = x.permute(0, 3, 1, 2)  # (N, H, W, C) -> (N, C, H, W)
        x = input + self.drop_path(x)
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.downsample = nn.Sequential(
            LayerNorm(IN_DIM, eps=1e-6, data_format="channels_first"),
            nn.Conv2d(IN_DIM, DIM, kernel_size=2, stride=2),
        )
        self.stage = nn.Sequential(*[Block(dim=DIM) for _ in range(DEPTH)])
        with torch.no_grad():
            for name, mod in self.named_modules():
                if isinstance(mod, (nn.Conv2d, nn.Linear)):
                    fan_in = mod.weight[0].numel()
                    std = 1.0 / math.sqrt(fan_in)
                    if name.endswith("pwconv2") or name.endswith("dwconv"):
                        std *= 0.5
                    mod.weight.normal_(0.0, std)
                    mod.bias.normal_(0.0, 0.02)
                elif isinstance(mod, LayerNorm):
                    mod.weight.copy_(1.0 + 0.1 * torch.randn_like(mod.weight))
                    mod.bias.normal_(0.0, 0.02)
                elif isinstance(mod, GRN):
                    mod.gamma.normal_(0.0, 0.1)
                    mod.beta.normal_(0.0, 0.1)
        self.eval()

    def forward(self, x):
        x = self.downsample(x)
        x = self.stage(x)
        return x


def get_inputs():
    return [torch.randn(BATCH, IN_DIM, H, W, dtype=torch.float32)]


def get_init_inputs():
    return []
