"""RegNetY-8GF -- first three blocks of stage 3 (Y-block: grouped-conv bottleneck + Squeeze-Excitation, BatchNorm).

Model / block: torchvision regnet_y_8gf (depth 17, w_0 192, w_a 76.82, w_m 2.19, group width 56, se_ratio 0.25
-> stage widths [224, 448, 896, 2016], depths [2, 4, 10, 1]). Stage 3 goes 448 -> 896 channels, 28x28 -> 14x14.
Each ResBottleneckBlock (bottleneck multiplier 1):
    f(x) = a: Conv1x1(w_in -> 896) + BN + ReLU
           b: Conv3x3(896 -> 896, stride s, groups 896/56 = 16) + BN + ReLU
           se: SqueezeExcitation(avgpool -> Conv1x1(896 -> round(0.25 * w_in)) -> ReLU -> Conv1x1 -> sigmoid -> scale)
           c: Conv1x1(896 -> 896) + BN (no activation)
    out = ReLU(proj(x) + f(x))   where proj = Conv1x1 stride s + BN on the first block, identity otherwise.
Block 1 has w_in 448, stride 2 (SE squeeze 112); blocks 2-3 have w_in 896, stride 1 (SE squeeze 224).
Upstream code followed: torchvision torchvision/models/regnet.py (BlockParams.from_init_params, BottleneckTransform,
ResBottleneckBlock, AnyStage) and torchvision/ops/misc.py (Conv2dNormActivation, SqueezeExcitation).
Use case: ImageNet classification / detection-backbone inference at 224x224, batch 64; BatchNorm in eval mode.
Shapes: input = stage-2 output (post-ReLU) [batch=64, 448, 28, 28] fp32 -> output [64, 896, 14, 14].
Rough FLOPs: block 1 ~0.64 GMAC/img, blocks 2-3 ~0.40 GMAC/img each -> 2 * 64 * 1.45 GMAC = ~185 GFLOP
(~4 ms at 50 TFLOP/s) plus the BN / ReLU / SE elementwise passes.

Departures:
- Only 3 of the 10 stage-3 blocks (the strided/projection one and two identity ones).
- Weights: torchvision's init (conv normal(0, sqrt(2/fan_out))); BatchNorm gamma 1 + 0.1 * noise, beta 0.1 * noise,
  and the BN running statistics calibrated in __init__ by a train-mode pass (momentum=None, cumulative) over
  2 random post-ReLU batches of 16 under torch.no_grad (skipped on the meta device); then self.eval().
- ReLU modules are not inplace (torchvision uses inplace=True) -- same values.
"""

import math

import torch
import torch.nn as nn

BATCH = 64
W_IN = 448
W_OUT = 896
GROUP_WIDTH = 56
SE_RATIO = 0.25
BOTTLENECK_MULT = 1.0
H = W = 28
NUM_BLOCKS = 3


class Conv2dNormActivation(nn.Sequential):
    def __init__(
        self, in_channels, out_channels, kernel_size=3, stride=1, groups=1, activation_layer=nn.ReLU
    ):
        padding = (kernel_size - 1) // 2
        layers = [
            nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, groups=groups, bias=False),
            nn.BatchNorm2d(out_channels, eps=1e-5, momentum=0.1),
        ]
        if activation_layer is not None:
            layers.append(activation_layer())
        super().__init__(*layers)
        self.out_channels = out_channels


class SqueezeExcitation(nn.Module):
    def __init__(self, input_channels, squeeze_channels, activation=nn.ReLU, scale_activation=nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def _scale(self, input):
        scale = self.avgpool(input)
        scale = self.fc1(scale)
        scale = self.activation(scale)
        scale = self.fc2(scale)
        return self.scale_activation(scale)

    def forward(self, input):
        scale = self._scale(input)
        return scale * input


class BottleneckTransform(nn.Sequential):
    def __init__(self, width_in, width_out, stride, group_width, bottleneck_multiplier, se_ratio):
        layers = []
        w_b = int(round(width_out * bottleneck_multiplier))
        g = w_b // group_width
        layers.append(("a", Conv2dNormActivation(width_in, w_b, kernel_size=1, stride=1)))
        layers.append(("b", Conv2dNormActivation(w_b, w_b, kernel_size=3, stride=stride, groups=g)))
        if se_ratio:
            width_se_out = int(round(se_ratio * width_in))
            layers.append(("se", SqueezeExcitation(input_channels=w_b, squeeze_channels=width_se_out)))
        layers.append(
            ("c", Conv2dNormActivation(w_b, width_out, kernel_size=1, stride=1, activation_layer=None))
        )
        super().__init__()
        for name, layer in layers:
            self.add_module(name, layer)


class ResBottleneckBlock(nn.Module):
    def __init__(self, width_in, width_out, stride, group_width, bottleneck_multiplier, se_ratio):
        super().__init__()
        self.proj = None
        should_proj = (width_in != width_out) or (stride != 1)
        if should_proj:
            self.proj = Conv2dNormActivation(
                width_in, width_out, kernel_size=1, stride=stride, activation_layer=None
            )
        self.f = BottleneckTransform(
            width_in, width_out, stride, group_width, bottleneck_multiplier, se_ratio
        )
        self.activation = nn.ReLU()

    def forward(self, x):
        if self.proj is not None:
            x = self.proj(x) + self.f(x)
        else:
            x = x + self.f(x)
        return self.activation(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        blocks = []
        for i in range(NUM_BLOCKS):
            blocks.append(
                ResBottleneckBlock(
                    W_IN if i == 0 else W_OUT,
                    W_OUT,
                    2 if i == 0 else 1,
                    GROUP_WIDTH,
                    BOTTLENECK_MULT,
                    SE_RATIO,
                )
            )
        self.blocks = nn.Sequential(*blocks)

        # torchvision RegNet init + trained-looking BN affine params
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                nn.init.normal_(m.weight, mean=0.0, std=math.sqrt(2.0 / fan_out))
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                with torch.no_grad():
                    m.weight.copy_(1.0 + 0.1 * torch.randn_like(m.weight))
                    m.bias.copy_(0.1 * torch.randn_like(m.bias))

        # BatchNorm statistics calibration (skipped on the meta device)
        if not next(self.parameters()).is_meta:
            bns = [m for m in self.modules() if isinstance(m, nn.BatchNorm2d)]
            for bn in bns:
                bn.reset_running_stats()
                bn.momentum = None  # cumulative moving average
            self.train()
            with torch.no_grad():
                for _ in range(2):
                    self.blocks(torch.randn(16, W_IN, H, W).clamp_min(0.0))
            for bn in bns:
                bn.momentum = 0.1
        self.eval()

    def forward(self, x):
        return self.blocks(x)


def get_inputs():
    # stage-2 output is post-ReLU
    return [torch.randn(BATCH, W_IN, H, W, dtype=torch.float32).clamp_min(0.0)]


def get_init_inputs():
    return []
