"""ResNeXt-50 32x4d's grouped 3 x 3 convolution in its stage-2 bottleneck (torchvision's
Bottleneck with groups 32, width 256): Conv2d 256 -> 256 in 32 groups, BatchNorm in eval mode,
ReLU; batch 32 at 28 x 28 (vision)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, width: int = 256, groups: int = 32):
        super().__init__()
        self.conv = nn.Conv2d(width, width, 3, padding=1, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(width)
        with torch.no_grad():  # trained statistics
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.2, 0.2)
        self.eval()

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(32, 256, 28, 28)]


def get_init_inputs():
    return []
