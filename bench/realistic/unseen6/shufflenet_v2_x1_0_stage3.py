"""ShuffleNetV2 x1.0's stage3 as torchvision writes it (torchvision/models/shufflenetv2.py,
shufflenet_v2_x1_0: stages_repeats [4, 8, 4], stages_out_channels [24, 116, 232, 464, 1024]):
eight InvertedResidual units, the first with stride 2 (116 x 28 x 28 -> 232 x 14 x 14: branch1 a
3 x 3 depthwise conv + BatchNorm, 1 x 1 conv + BatchNorm + ReLU; branch2 1 x 1 conv + BatchNorm +
ReLU, 3 x 3 depthwise conv with stride 2 + BatchNorm, 1 x 1 conv + BatchNorm + ReLU; the two
concatenated), the other seven with stride 1 (x.chunk(2, dim=1), branch2 on the second half,
torch.cat with the first); every unit ends in channel_shuffle with 2 groups (view to [b, 2, c/2,
h, w], transpose(1, 2).contiguous(), view back). Convolutions without bias, BatchNorm2d in eval
mode, ReLU in place. A vision block at ImageNet evaluation: batch 256 images at 224 x 224 (the
input is stage2's output, 116 channels at 28 x 28)."""

import torch
import torch.nn as nn
from torch import Tensor

BATCH, IN_CHANNELS, OUT_CHANNELS, SIZE, REPEATS = 256, 116, 232, 28, 8


def channel_shuffle(x: Tensor, groups: int) -> Tensor:
    batchsize, num_channels, height, width = x.size()
    channels_per_group = num_channels // groups

    # reshape
    x = x.view(batchsize, groups, channels_per_group, height, width)

    x = torch.transpose(x, 1, 2).contiguous()

    # flatten
    x = x.view(batchsize, -1, height, width)

    return x


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int) -> None:
        super().__init__()

        if not (1 <= stride <= 3):
            raise ValueError("illegal stride value")
        self.stride = stride

        branch_features = oup // 2
        if (self.stride == 1) and (inp != branch_features << 1):
            raise ValueError(
                f"Invalid combination of stride {stride}, inp {inp} and oup {oup} values. If stride == 1 then inp should be equal to oup // 2 << 1."
            )

        if self.stride > 1:
            self.branch1 = nn.Sequential(
                self.depthwise_conv(inp, inp, kernel_size=3, stride=self.stride, padding=1),
                nn.BatchNorm2d(inp),
                nn.Conv2d(inp, branch_features, kernel_size=1, stride=1, padding=0, bias=False),
                nn.BatchNorm2d(branch_features),
                nn.ReLU(inplace=True),
            )
        else:
            self.branch1 = nn.Sequential()

        self.branch2 = nn.Sequential(
            nn.Conv2d(
                inp if (self.stride > 1) else branch_features,
                branch_features,
                kernel_size=1,
                stride=1,
                padding=0,
                bias=False,
            ),
            nn.BatchNorm2d(branch_features),
            nn.ReLU(inplace=True),
            self.depthwise_conv(
                branch_features, branch_features, kernel_size=3, stride=self.stride, padding=1
            ),
            nn.BatchNorm2d(branch_features),
            nn.Conv2d(branch_features, branch_features, kernel_size=1, stride=1, padding=0, bias=False),
            nn.BatchNorm2d(branch_features),
            nn.ReLU(inplace=True),
        )

    @staticmethod
    def depthwise_conv(
        i: int, o: int, kernel_size: int, stride: int = 1, padding: int = 0, bias: bool = False
    ) -> nn.Conv2d:
        return nn.Conv2d(i, o, kernel_size, stride, padding, bias=bias, groups=i)

    def forward(self, x: Tensor) -> Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)

        out = channel_shuffle(out, 2)

        return out


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        # ShuffleNetV2.__init__'s stage loop for stage3
        seq = [InvertedResidual(IN_CHANNELS, OUT_CHANNELS, 2)]
        for _ in range(REPEATS - 1):
            seq.append(InvertedResidual(OUT_CHANNELS, OUT_CHANNELS, 1))
        self.stage3 = nn.Sequential(*seq)
        with torch.no_grad():  # trained statistics
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 2.0)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)
        self.eval()

    def forward(self, x):
        return self.stage3(x)


def get_inputs():
    return [torch.relu(torch.randn(BATCH, IN_CHANNELS, SIZE, SIZE))]


def get_init_inputs():
    return []
