"""X3D-M residual stage 2 ("res3"): 5 bottleneck blocks with depthwise 3x3x3 conv + SE.

Model / block
    X3D-M video classifier (Feichtenhofer 2020, Kinetics-400), its second
    residual stage: 5 X3D bottleneck ResBlocks, 24 -> 48 channels, inner width
    108 (bottleneck_factor 2.25), the first block spatially strided (1,2,2) with
    a 1x1x1 conv + BN shortcut.  Each bottleneck: 1x1x1 Conv3d -> BN3d -> ReLU ->
    depthwise 3x3x3 Conv3d -> BN3d -> [Squeeze-Excitation on blocks 0, 2, 4]
    -> Swish -> 1x1x1 Conv3d -> BN3d; residual add; ReLU.

Upstream code followed
    facebookresearch/pytorchvideo: `pytorchvideo/models/x3d.py`
    (create_x3d, create_x3d_res_stage, create_x3d_res_block,
    create_x3d_bottleneck_block), `pytorchvideo/models/resnet.py`
    (BottleneckBlock, ResBlock, ResStage forward), `pytorchvideo/layers/swish.py`
    (Swish), `pytorchvideo/layers/utils.py` (round_width) and fvcore
    `fvcore/nn/squeeze_excitation.py` (SqueezeExcitation, is_3d=True).
    Stage dims from create_x3d defaults for X3D-M: stem 24, stage dim_out 48,
    dim_inner int(2.25 * 48) = 108, depth round_repeats(2, 2.2) = 5, SE width
    round_width(108, 0.0625) = 8, SE on every other block.

Use case and shapes
    Kinetics-400 evaluation of X3D-M: 16 frames at 224x224 and 30 views per
    video (10 temporal clips x 3 spatial crops) batched together.  The stage
    input is the stage-1 output at 1/4 resolution: (30, 24, 16, 56, 56)
    (post-ReLU activations, so the test input is ReLU'd Gaussian noise).

    input : float32 (30, 24, 16, 56, 56)
    output: float32 (30, 48, 16, 28, 28)

Cost (rough)
    Parameters 73.2 k (tiny; BN running stats add 2.8 k buffer entries).
    FLOPs: block 0 conv_a at 56x56 (24->108) 2*30*16*3136*24*108 = 7.8 GFLOP,
    blocks 1-4 conv_a 48->108 at 28x28: 4*3.9 GFLOP, depthwise 27-tap convs
    5*2*30*16*784*108*27 = 11 GFLOP, conv_c 108->48: 5*3.9 GFLOP, shortcut
    0.9 GFLOP: ~55 GFLOP (1.4 ms at 40 TFLOP/s) -- the stage is memory bound:
    block-0 inner tensors are 30*108*16*56*56*4 B = 650 MB and every BN / ReLU /
    Swish / SE multiply is a separate eager pass; roughly 8-10 GB moved
    (~3.5 ms at 2.5 TB/s).

Departures:
    - One stage of X3D-M instead of the whole network (no stem, other stages,
      head).
    - Conv weights: pytorchvideo init_net_weights style (kaiming_normal,
      fan_out, relu) for all convs, SE conv biases U(-0.1, 0.1) instead of 0;
      BN running statistics are calibrated in
      __init__ by one train-mode pass (momentum=None, cumulative average) over
      a fixed-seed batch of 4 clips, then the BN affine parameters are set to
      weight 1 + U(-0.3, 0.3) and bias U(-0.2, 0.2) (upstream: 1 / 0 before
      training).
    - Swish is written as x * sigmoid(x) instead of the autograd.Function
      SwishFunction (same forward, inference only).
"""

import math

import torch
import torch.nn as nn

BATCH = 30  # 10 clips x 3 crops
FRAMES = 16
IN_HW = 56
DIM_IN = 24
DIM_OUT = 48
BOTTLENECK_FACTOR = 2.25
DEPTH = 5
SE_RATIO = 0.0625
NORM_EPS = 1e-5
NORM_MOMENTUM = 0.1


def round_width(width, multiplier, min_width=8, divisor=8, ceil=False):
    if not multiplier:
        return width
    width *= multiplier
    min_width = min_width or divisor
    if ceil:
        width_out = max(min_width, int(math.ceil(width / divisor)) * divisor)
    else:
        width_out = max(min_width, int(width + divisor / 2) // divisor * divisor)
    if width_out < 0.9 * width:
        width_out += divisor
    return int(width_out)


class Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class SqueezeExcitation(nn.Module):
    """fvcore.nn.squeeze_excitation.SqueezeExcitation"""

    def __init__(
        self, num_channels, num_channels_reduced=None, reduction_ratio=2.0, is_3d=False, activation=None
    ):
        super().__init__()
        if num_channels_reduced is None:
            num_channels_reduced = int(round(num_channels / reduction_ratio))
        if activation is None:
            activation = nn.ReLU()
        if is_3d:
            conv1 = nn.Conv3d(num_channels, num_channels_reduced, kernel_size=1, bias=True)
            conv2 = nn.Conv3d(num_channels_reduced, num_channels, kernel_size=1, bias=True)
        else:
            conv1 = nn.Conv2d(num_channels, num_channels_reduced, kernel_size=1, bias=True)
            conv2 = nn.Conv2d(num_channels_reduced, num_channels, kernel_size=1, bias=True)
        self.is_3d = is_3d
        self.block = nn.Sequential(conv1, activation, conv2, nn.Sigmoid())

    def forward(self, input_tensor):
        mean_tensor = (
            input_tensor.mean(dim=[2, 3, 4], keepdim=True)
            if self.is_3d
            else input_tensor.mean(dim=[2, 3], keepdim=True)
        )
        output_tensor = torch.mul(input_tensor, self.block(mean_tensor))
        return output_tensor


class BottleneckBlock(nn.Module):
    def __init__(self, conv_a, norm_a, act_a, conv_b, norm_b, act_b, conv_c, norm_c):
        super().__init__()
        self.conv_a = conv_a
        self.norm_a = norm_a
        self.act_a = act_a
        self.conv_b = conv_b
        self.norm_b = norm_b
        self.act_b = act_b
        self.conv_c = conv_c
        self.norm_c = norm_c

    def forward(self, x):
        # Explicitly forward every layer.
        # Branch2a, for example Tx1x1, BN, ReLU.
        x = self.conv_a(x)
        if self.norm_a is not None:
            x = self.norm_a(x)
        if self.act_a is not None:
            x = self.act_a(x)
        # Branch2b, for example 1xHxW, BN, ReLU.
        x = self.conv_b(x)
        if self.norm_b is not None:
            x = self.norm_b(x)
        if self.act_b is not None:
            x = self.act_b(x)
        # Branch2c, for example 1x1x1, BN.
        x = self.conv_c(x)
        if self.norm_c is not None:
            x = self.norm_c(x)
        return x


class ResBlock(nn.Module):
    def __init__(self, branch1_conv, branch1_norm, branch2, activation, branch_fusion):
        super().__init__()
        self.branch1_conv = branch1_conv
        self.branch1_norm = branch1_norm
        self.branch2 = branch2
        self.activation = activation
        self.branch_fusion = branch_fusion

    def forward(self, x):
        if self.branch1_conv is None:
            x = self.branch_fusion(x, self.branch2(x))
        else:
            shortcut = self.branch1_conv(x)
            if self.branch1_norm is not None:
                shortcut = self.branch1_norm(shortcut)
            x = self.branch_fusion(shortcut, self.branch2(x))
        if self.activation is not None:
            x = self.activation(x)
        return x


class ResStage(nn.Module):
    def __init__(self, res_blocks):
        super().__init__()
        self.res_blocks = res_blocks

    def forward(self, x):
        for _, res_block in enumerate(self.res_blocks):
            x = res_block(x)
        return x


def _add(x, y):
    return x + y


def create_x3d_bottleneck_block(
    *,
    dim_in,
    dim_inner,
    dim_out,
    conv_kernel_size=(3, 3, 3),
    conv_stride=(1, 2, 2),
    norm=nn.BatchNorm3d,
    norm_eps=1e-5,
    norm_momentum=0.1,
    se_ratio=0.0625,
    activation=nn.ReLU,
    inner_act=Swish,
):
    # 1x1x1 Conv
    conv_a = nn.Conv3d(in_channels=dim_in, out_channels=dim_inner, kernel_size=(1, 1, 1), bias=False)
    norm_a = None if norm is None else norm(num_features=dim_inner, eps=norm_eps, momentum=norm_momentum)
    act_a = None if activation is None else activation()

    # 3x3x3 Conv
    conv_b = nn.Conv3d(
        in_channels=dim_inner,
        out_channels=dim_inner,
        kernel_size=conv_kernel_size,
        stride=conv_stride,
        padding=[size // 2 for size in conv_kernel_size],
        bias=False,
        groups=dim_inner,
        dilation=(1, 1, 1),
    )
    se = (
        SqueezeExcitation(
            num_channels=dim_inner,
            num_channels_reduced=round_width(dim_inner, se_ratio),
            is_3d=True,
        )
        if se_ratio > 0.0
        else nn.Identity()
    )
    norm_b = nn.Sequential(
        (
            nn.Identity()
            if norm is None
            else norm(num_features=dim_inner, eps=norm_eps, momentum=norm_momentum)
        ),
        se,
    )
    act_b = None if inner_act is None else inner_act()

    # 1x1x1 Conv
    conv_c = nn.Conv3d(in_channels=dim_inner, out_channels=dim_out, kernel_size=(1, 1, 1), bias=False)
    norm_c = None if norm is None else norm(num_features=dim_out, eps=norm_eps, momentum=norm_momentum)

    return BottleneckBlock(
        conv_a=conv_a,
        norm_a=norm_a,
        act_a=act_a,
        conv_b=conv_b,
        norm_b=norm_b,
        act_b=act_b,
        conv_c=conv_c,
        norm_c=norm_c,
    )


def create_x3d_res_block(
    *,
    dim_in,
    dim_inner,
    dim_out,
    bottleneck=create_x3d_bottleneck_block,
    use_shortcut=True,
    conv_kernel_size=(3, 3, 3),
    conv_stride=(1, 2, 2),
    norm=nn.BatchNorm3d,
    norm_eps=1e-5,
    norm_momentum=0.1,
    se_ratio=0.0625,
    activation=nn.ReLU,
    inner_act=Swish,
):
    norm_model = None
    if norm is not None and dim_in != dim_out:
        norm_model = norm(num_features=dim_out)

    return ResBlock(
        branch1_conv=nn.Conv3d(dim_in, dim_out, kernel_size=(1, 1, 1), stride=conv_stride, bias=False)
        if (dim_in != dim_out or math.prod(conv_stride) > 1) and use_shortcut
        else None,
        branch1_norm=norm_model if dim_in != dim_out and use_shortcut else None,
        branch2=bottleneck(
            dim_in=dim_in,
            dim_inner=dim_inner,
            dim_out=dim_out,
            conv_kernel_size=conv_kernel_size,
            conv_stride=conv_stride,
            norm=norm,
            norm_eps=norm_eps,
            norm_momentum=norm_momentum,
            se_ratio=se_ratio,
            activation=activation,
            inner_act=inner_act,
        ),
        activation=None if activation is None else activation(),
        branch_fusion=_add,
    )


def create_x3d_res_stage(
    *,
    depth,
    dim_in,
    dim_inner,
    dim_out,
    bottleneck=create_x3d_bottleneck_block,
    conv_kernel_size=(3, 3, 3),
    conv_stride=(1, 2, 2),
    norm=nn.BatchNorm3d,
    norm_eps=1e-5,
    norm_momentum=0.1,
    se_ratio=0.0625,
    activation=nn.ReLU,
    inner_act=Swish,
):
    res_blocks = []
    for idx in range(depth):
        block = create_x3d_res_block(
            dim_in=dim_in if idx == 0 else dim_out,
            dim_inner=dim_inner,
            dim_out=dim_out,
            bottleneck=bottleneck,
            conv_kernel_size=conv_kernel_size,
            conv_stride=conv_stride if idx == 0 else (1, 1, 1),
            norm=norm,
            norm_eps=norm_eps,
            norm_momentum=norm_momentum,
            se_ratio=(se_ratio if (idx + 1) % 2 else 0.0),
            activation=activation,
            inner_act=inner_act,
        )
        res_blocks.append(block)

    return ResStage(res_blocks=nn.ModuleList(res_blocks))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        dim_inner = int(BOTTLENECK_FACTOR * DIM_OUT)
        self.stage = create_x3d_res_stage(
            depth=DEPTH,
            dim_in=DIM_IN,
            dim_inner=dim_inner,
            dim_out=DIM_OUT,
            conv_kernel_size=(3, 3, 3),
            conv_stride=(1, 2, 2),
            norm_eps=NORM_EPS,
            norm_momentum=NORM_MOMENTUM,
            se_ratio=SE_RATIO,
        )
        # pytorchvideo init_net_weights(style="resnet"): c2_msra_fill for every conv
        for m in self.stage.modules():
            if isinstance(m, nn.Conv3d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    # departure: non-zero SE conv biases (c2_msra_fill zeroes them)
                    nn.init.uniform_(m.bias, -0.1, 0.1)
        self._calibrate_bn()
        self.eval()

    @torch.no_grad()
    def _calibrate_bn(self):
        bns = [m for m in self.modules() if isinstance(m, nn.BatchNorm3d)]
        for bn in bns:
            bn.reset_running_stats()
            bn.momentum = None  # cumulative moving average
        g = torch.Generator().manual_seed(1234)
        x = torch.randn(4, DIM_IN, FRAMES, IN_HW, IN_HW, generator=g).relu_()
        self.train()
        self.stage(x)
        for bn in bns:
            bn.momentum = NORM_MOMENTUM
            bn.weight.add_(torch.empty_like(bn.weight).uniform_(-0.3, 0.3))
            bn.bias.uniform_(-0.2, 0.2)

    def forward(self, x):
        return self.stage(x)


def get_inputs():
    return [torch.randn(BATCH, DIM_IN, FRAMES, IN_HW, IN_HW, dtype=torch.float32).relu_()]


def get_init_inputs():
    return []
