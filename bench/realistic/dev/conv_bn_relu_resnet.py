"""A ResNet-50 stage-3 convolution in inference: Conv2d 3x3 256 -> 256 (no bias), BatchNorm
with running statistics (eval mode), ReLU; batch 32 at 14 x 14."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels: int = 256):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():  # statistics as a trained model has them
            self.bn.running_mean.copy_(torch.rand(channels, generator=generator, device="cpu") - 0.5)
            self.bn.running_var.copy_(torch.rand(channels, generator=generator, device="cpu") * 2 + 0.25)
            self.bn.weight.copy_(torch.rand(channels, generator=generator, device="cpu") + 0.5)
        self.eval()

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(32, 256, 14, 14)]


def get_init_inputs():
    return []
