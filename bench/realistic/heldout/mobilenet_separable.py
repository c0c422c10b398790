"""MobileNetV2's inverted-residual tail in inference: depthwise 3x3 conv on 384 channels,
BatchNorm, ReLU6, pointwise 1x1 conv 384 -> 64, BatchNorm; batch 64 at 14 x 14."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels: int = 384, out: int = 64):
        super().__init__()
        self.dw = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.act = nn.ReLU6(inplace=True)
        self.pw = nn.Conv2d(channels, out, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out)
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():  # statistics as a trained model has them
            for bn in (self.bn1, self.bn2):
                n = bn.num_features
                bn.running_mean.copy_(torch.rand(n, generator=generator, device="cpu") - 0.5)
                bn.running_var.copy_(torch.rand(n, generator=generator, device="cpu") * 2 + 0.25)
        self.eval()

    def forward(self, x):
        return self.bn2(self.pw(self.act(self.bn1(self.dw(x)))))


def get_inputs():
    return [torch.randn(64, 384, 14, 14)]


def get_init_inputs():
    return []
