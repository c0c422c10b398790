"""EfficientNet-B0's MBConv block at stage 3 (torchvision's MBConv, expand ratio 6): 1 x 1
expansion 40 -> 240 + BatchNorm + SiLU, depthwise 5 x 5 + BatchNorm + SiLU, squeeze-excitation
(average pool, 240 -> 10 -> 240, SiLU, sigmoid gate), 1 x 1 projection 240 -> 40 + BatchNorm,
residual add; eval mode, batch 32 at 28 x 28 (vision)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels: int = 40, expanded: int = 240, squeezed: int = 10):
        super().__init__()
        self.expand = nn.Sequential(
            nn.Conv2d(channels, expanded, 1, bias=False), nn.BatchNorm2d(expanded), nn.SiLU()
        )
        self.depthwise = nn.Sequential(
            nn.Conv2d(expanded, expanded, 5, padding=2, groups=expanded, bias=False),
            nn.BatchNorm2d(expanded),
            nn.SiLU(),
        )
        self.se_reduce = nn.Conv2d(expanded, squeezed, 1)
        self.se_expand = nn.Conv2d(squeezed, expanded, 1)
        self.project = nn.Sequential(nn.Conv2d(expanded, channels, 1, bias=False), nn.BatchNorm2d(channels))
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                with torch.no_grad():
                    m.running_mean.normal_(0.0, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
                    m.weight.normal_(1.0, 0.1)
                    m.bias.normal_(0.0, 0.1)
        self.eval()

    def forward(self, x):
        y = self.depthwise(self.expand(x))
        scale = torch.sigmoid(
            self.se_expand(nn.functional.silu(self.se_reduce(y.mean((2, 3), keepdim=True))))
        )
        return x + self.project(y * scale)


def get_inputs():
    return [torch.randn(32, 40, 28, 28)]


def get_init_inputs():
    return []
