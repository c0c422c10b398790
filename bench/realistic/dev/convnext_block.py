"""ConvNeXt-T's block at stage 1 (torchvision's CNBlock): depthwise 7 x 7 convolution over 96
channels, permute to channels-last, LayerNorm, Linear 96 -> 384, GELU, Linear 384 -> 96, layer
scale, permute back, residual add; batch 32 at 56 x 56 (vision; no BatchNorm in this block)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int = 96):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.layer_scale = nn.Parameter(torch.full((dim, 1, 1), 0.1))

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(self.act(self.pwconv1(self.norm(y))))
        return x + self.layer_scale * y.permute(0, 3, 1, 2)


def get_inputs():
    return [torch.randn(32, 96, 56, 56)]


def get_init_inputs():
    return []
