"""YOLOv8's Conv module on its P2 downsampling: Conv2d 64 -> 128 (3 x 3, stride 2, no bias),
BatchNorm in eval mode (running statistics, eps 1e-3), SiLU; batch 16 at 160 x 160 (a
detector's backbone; vision)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c_in: int = 64, c_out: int = 128):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, 2, 1, bias=False)
        self.bn = nn.BatchNorm2d(c_out, eps=1e-3, momentum=0.03)
        self.act = nn.SiLU()
        with torch.no_grad():  # trained statistics, not the fresh module's identity
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.2, 0.2)
        self.eval()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(16, 64, 160, 160)]


def get_init_inputs():
    return []
