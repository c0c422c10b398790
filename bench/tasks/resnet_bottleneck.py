"""ResNet-50's first bottleneck of layer 2 in inference (torchvision's layout: 1x1, 3x3 with
stride 2, 1x1, a strided 1x1 + BatchNorm shortcut, in-place ReLUs), batch 32 at 56x56 in, with
running statistics as a trained model has them (bench_strategies.py: the conv + BN + ReLU fold)."""

import torch
import torch.nn as nn

batch_size, cin, width, size = 32, 256, 128, 56


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, 4 * width, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(4 * width)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = nn.Sequential(
            nn.Conv2d(cin, 4 * width, 1, stride=2, bias=False), nn.BatchNorm2d(4 * width)
        )
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.copy_(
                        (torch.rand(m.num_features, generator=generator, device="cpu") - 0.5) * 0.4
                    )
                    m.running_var.copy_(torch.rand(m.num_features, generator=generator, device="cpu") + 0.5)
        self.eval()

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + self.downsample(x))


def get_inputs():
    return [torch.randn(batch_size, cin, size, size)]


def get_init_inputs():
    return []
