"""Inception-v3's Mixed_5b block (torchvision's InceptionA, in_channels 192, pool_features 32)
in inference: four branches over the 35 x 35 map, each a chain of BasicConv2d (Conv2d without
bias, BatchNorm in eval mode with eps 1e-3, ReLU): 1 x 1 -> 64; 1 x 1 -> 48 then 5 x 5 -> 64;
1 x 1 -> 64 then 3 x 3 -> 96 then 3 x 3 -> 96; a 3 x 3 average pool (stride 1, padding 1,
padding counted) then 1 x 1 -> 32; concatenated to 256 channels. Batch 32 of 299 x 299 images
(the stem's output, 192 channels at 35 x 35; vision)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

IN_CHANNELS, POOL_FEATURES = 192, 32
BATCH, SIZE = 32, 35


class BasicConv2d(nn.Module):
    def __init__(self, in_channels, out_channels, **kwargs):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
        self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

    def forward(self, x):
        x = self.conv(x)
        x = self.bn(x)
        return F.relu(x, inplace=True)


class InceptionA(nn.Module):
    def __init__(self, in_channels, pool_features, conv_block=None):
        super().__init__()
        if conv_block is None:
            conv_block = BasicConv2d
        self.branch1x1 = conv_block(in_channels, 64, kernel_size=1)

        self.branch5x5_1 = conv_block(in_channels, 48, kernel_size=1)
        self.branch5x5_2 = conv_block(48, 64, kernel_size=5, padding=2)

        self.branch3x3dbl_1 = conv_block(in_channels, 64, kernel_size=1)
        self.branch3x3dbl_2 = conv_block(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = conv_block(96, 96, kernel_size=3, padding=1)

        self.branch_pool = conv_block(in_channels, pool_features, kernel_size=1)

    def _forward(self, x):
        branch1x1 = self.branch1x1(x)

        branch5x5 = self.branch5x5_1(x)
        branch5x5 = self.branch5x5_2(branch5x5)

        branch3x3dbl = self.branch3x3dbl_1(x)
        branch3x3dbl = self.branch3x3dbl_2(branch3x3dbl)
        branch3x3dbl = self.branch3x3dbl_3(branch3x3dbl)

        branch_pool = F.avg_pool2d(x, kernel_size=3, stride=1, padding=1)
        branch_pool = self.branch_pool(branch_pool)

        outputs = [branch1x1, branch5x5, branch3x3dbl, branch_pool]
        return outputs

    def forward(self, x):
        outputs = self._forward(x)
        return torch.cat(outputs, 1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.Mixed_5b = InceptionA(IN_CHANNELS, pool_features=POOL_FEATURES)
        with torch.no_grad():  # trained statistics
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 2.0)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)
        self.eval()

    def forward(self, x):
        return self.Mixed_5b(x)


def get_inputs():
    # the stem ends with ReLU and a 3 x 3 max-pool, so the block's input is non-negative
    return [torch.relu(torch.randn(BATCH, IN_CHANNELS, SIZE, SIZE))]


def get_init_inputs():
    return []
