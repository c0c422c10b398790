"""Stable Diffusion's UNet normalisation + activation (diffusers' ResnetBlock2D, first half):
GroupNorm with 32 groups over 320 channels (eps 1e-5, learnt affine), then SiLU; batch 2 at
the 64 x 64 latent (vision)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels: int = 320, groups: int = 32):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.1)
            self.norm.bias.normal_(0.0, 0.1)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.norm(x))


def get_inputs():
    return [torch.randn(2, 320, 64, 64)]


def get_init_inputs():
    return []
