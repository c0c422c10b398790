"""EfficientViT-B1 (MIT Han Lab, "EfficientViT: Multi-Scale Linear Attention for
High-Resolution Dense Prediction") backbone stage 3 for Cityscapes semantic
segmentation, following the official mit-han-lab/efficientvit repo:
efficientvit/models/nn/ops.py (ConvLayer, MBConv, LiteMLA, EfficientViTBlock,
ResidualBlock, IdentityLayer) and efficientvit/models/efficientvit/backbone.py
(EfficientViTBackbone stage construction with fewer_norm downsampling).

Stage: a stride-2 MBConv downsample (expand 16, fewer_norm: only the point conv has
BatchNorm, hardswish activations) 64 -> 128 channels, then 3 EfficientViTBlocks, each
= LiteMLA (ReLU linear attention, head dim 16, multi-scale q/k/v aggregation with a
5x5 depthwise + grouped 1x1 conv, BatchNorm after the output projection) + MBConv
(expand 4) local module, both residual.
Shapes: 1024x2048 Cityscapes evaluation, batch 4: stage input
(4, 64, 128, 256) at stride 8 -> (4, 128, 64, 128) at stride 16.
Rough cost: ~70 GFLOP.

BatchNorm running statistics come from a calibration pass in __init__ (one forward of
a random batch of 16 at 32x64 with BatchNorm in train mode and momentum 1.0), then
eval.
Conv weights keep PyTorch's default init.

Departures: LiteMLA's relu_linear_att is decorated with autocast(enabled=False) and
casts fp16 to fp32 in the original; everything here is fp32 so that is omitted.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4
IN_CHANNELS = 64
WIDTH = 128
DEPTH = 3
HEAD_DIM = 16
EXPAND_RATIO = 4
IN_H = 128
IN_W = 256
CALIB_BATCH = 16
CALIB_H = 32
CALIB_W = 64


def get_same_padding(kernel_size):
    assert kernel_size % 2 > 0, "kernel size should be odd number"
    return kernel_size // 2


def val2tuple(x, min_len=1, idx_repeat=-1):
    x = list(x) if isinstance(x, (list, tuple)) else [x]
    if len(x) > 0:
        x[idx_repeat:idx_repeat] = [x[idx_repeat] for _ in range(min_len - len(x))]
    return tuple(x)


def build_norm(name="bn2d", num_features=None):
    if name == "bn2d":
        return nn.BatchNorm2d(num_features)
    elif name == "ln":
        return nn.LayerNorm(num_features)
    return None


def build_act(name, inplace=True):
    if name == "relu":
        return nn.ReLU(inplace=inplace)
    elif name == "relu6":
        return nn.ReLU6(inplace=inplace)
    elif name == "hswish":
        return nn.Hardswish(inplace=inplace)
    elif name == "silu":
        return nn.SiLU(inplace=inplace)
    return None


class IdentityLayer(nn.Module):
    def forward(self, x):
        return x


class ConvLayer(nn.Module):
    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size=3,
        stride=1,
        dilation=1,
        groups=1,
        use_bias=False,
        dropout=0,
        norm="bn2d",
        act_func="relu",
    ):
        super().__init__()
        padding = get_same_padding(kernel_size)
        padding *= dilation
        self.dropout = nn.Dropout2d(dropout, inplace=False) if dropout > 0 else None
        self.conv = nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size=(kernel_size, kernel_size),
            stride=(stride, stride),
            padding=padding,
            dilation=(dilation, dilation),
            groups=groups,
            bias=use_bias,
        )
        self.norm = build_norm(norm, num_features=out_channels)
        self.act = build_act(act_func)

    def forward(self, x):
        if self.dropout is not None:
            x = self.dropout(x)
        x = self.conv(x)
        if self.norm:
            x = self.norm(x)
        if self.act:
            x = self.act(x)
        return x


class MBConv(nn.Module):
    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size=3,
        stride=1,
        mid_channels=None,
        expand_ratio=6,
        use_bias=False,
        norm=("bn2d", "bn2d", "bn2d"),
        act_func=("relu6", "relu6", None),
    ):
        super().__init__()
        use_bias = val2tuple(use_bias, 3)
        norm = val2tuple(norm, 3)
        act_func = val2tuple(act_func, 3)
        mid_channels = mid_channels or round(in_channels * expand_ratio)

        self.inverted_conv = ConvLayer(
            in_channels, mid_channels, 1, stride=1, norm=norm[0], act_func=act_func[0], use_bias=use_bias[0]
        )
        self.depth_conv = ConvLayer(
            mid_channels,
            mid_channels,
            kernel_size,
            stride=stride,
            groups=mid_channels,
            norm=norm[1],
            act_func=act_func[1],
            use_bias=use_bias[1],
        )
        self.point_conv = ConvLayer(
            mid_channels, out_channels, 1, norm=norm[2], act_func=act_func[2], use_bias=use_bias[2]
        )

    def forward(self, x):
        x = self.inverted_conv(x)
        x = self.depth_conv(x)
        x = self.point_conv(x)
        return x


class LiteMLA(nn.Module):
    r"""Lightweight multi-scale linear attention"""

    def __init__(
        self,
        in_channels,
        out_channels,
        heads=None,
        heads_ratio=1.0,
        dim=8,
        use_bias=False,
        norm=(None, "bn2d"),
        act_func=(None, None),
        kernel_func="relu",
        scales=(5,),
        eps=1.0e-15,
    ):
        super().__init__()
        self.eps = eps
        heads = int(in_channels // dim * heads_ratio) if heads is None else heads
        total_dim = heads * dim
        use_bias = val2tuple(use_bias, 2)
        norm = val2tuple(norm, 2)
        act_func = val2tuple(act_func, 2)
        self.dim = dim
        self.qkv = ConvLayer(
            in_channels, 3 * total_dim, 1, use_bias=use_bias[0], norm=norm[0], act_func=act_func[0]
        )
        self.aggreg = nn.ModuleList(
            [
                nn.Sequential(
                    nn.Conv2d(
                        3 * total_dim,
                        3 * total_dim,
                        scale,
                        padding=get_same_padding(scale),
                        groups=3 * total_dim,
                        bias=use_bias[0],
                    ),
                    nn.Conv2d(3 * total_dim, 3 * total_dim, 1, groups=3 * heads, bias=use_bias[0]),
                )
                for scale in scales
            ]
        )
        self.kernel_func = build_act(kernel_func, inplace=False)
        self.proj = ConvLayer(
            total_dim * (1 + len(scales)),
            out_channels,
            1,
            use_bias=use_bias[1],
            norm=norm[1],
            act_func=act_func[1],
        )

    def relu_linear_att(self, qkv):
        B, _, H, W = list(qkv.size())

        qkv = torch.reshape(qkv, (B, -1, 3 * self.dim, H * W))
        qkv = torch.transpose(qkv, -1, -2)
        q, k, v = (qkv[..., 0 : self.dim], qkv[..., self.dim : 2 * self.dim], qkv[..., 2 * self.dim :])

        # lightweight linear attention
        q = self.kernel_func(q)
        k = self.kernel_func(k)

        # linear matmul
        trans_k = k.transpose(-1, -2)

        v = F.pad(v, (0, 1), mode="constant", value=1)
        kv = torch.matmul(trans_k, v)
        out = torch.matmul(q, kv)
        out = out[..., :-1] / (out[..., -1:] + self.eps)

        out = torch.transpose(out, -1, -2)
        out = torch.reshape(out, (B, -1, H, W))
        return out

    def forward(self, x):
        # generate multi-scale q, k, v
        qkv = self.qkv(x)
        multi_scale_qkv = [qkv]
        for op in self.aggreg:
            multi_scale_qkv.append(op(qkv))
        multi_scale_qkv = torch.cat(multi_scale_qkv, dim=1)

        out = self.relu_linear_att(multi_scale_qkv)
        out = self.proj(out)
        return out


class ResidualBlock(nn.Module):
    def __init__(self, main, shortcut, post_act=None, pre_norm=None):
        super().__init__()
        self.pre_norm = pre_norm
        self.main = main
        self.shortcut = shortcut
        self.post_act = build_act(post_act)

    def forward_main(self, x):
        if self.pre_norm is None:
            return self.main(x)
        else:
            return self.main(self.pre_norm(x))

    def forward(self, x):
        if self.main is None:
            res = x
        elif self.shortcut is None:
            res = self.forward_main(x)
        else:
            res = self.forward_main(x) + self.shortcut(x)
            if self.post_act:
                res = self.post_act(res)
        return res


class EfficientViTBlock(nn.Module):
    def __init__(
        self,
        in_channels,
        heads_ratio=1.0,
        dim=32,
        expand_ratio=4,
        scales=(5,),
        norm="bn2d",
        act_func="hswish",
    ):
        super().__init__()
        self.context_module = ResidualBlock(
            LiteMLA(
                in_channels=in_channels,
                out_channels=in_channels,
                heads_ratio=heads_ratio,
                dim=dim,
                norm=(None, norm),
                scales=scales,
            ),
            IdentityLayer(),
        )
        local_module = MBConv(
            in_channels=in_channels,
            out_channels=in_channels,
            expand_ratio=expand_ratio,
            use_bias=(True, True, False),
            norm=(None, None, norm),
            act_func=(act_func, act_func, None),
        )
        self.local_module = ResidualBlock(local_module, IdentityLayer())

    def forward(self, x):
        x = self.context_module(x)
        x = self.local_module(x)
        return x


def build_local_block(in_channels, out_channels, stride, expand_ratio, norm, act_func, fewer_norm=False):
    if expand_ratio == 1:
        raise NotImplementedError
    block = MBConv(
        in_channels=in_channels,
        out_channels=out_channels,
        stride=stride,
        expand_ratio=expand_ratio,
        use_bias=(True, True, False) if fewer_norm else False,
        norm=(None, None, norm) if fewer_norm else norm,
        act_func=(act_func, act_func, None),
    )
    return block


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        norm = "bn2d"
        act_func = "hswish"
        stage = []
        block = build_local_block(
            in_channels=IN_CHANNELS,
            out_channels=WIDTH,
            stride=2,
            expand_ratio=EXPAND_RATIO * 4,
            norm=norm,
            act_func=act_func,
            fewer_norm=True,
        )
        stage.append(ResidualBlock(block, None))
        in_channels = WIDTH
        for _ in range(DEPTH):
            stage.append(
                EfficientViTBlock(
                    in_channels=in_channels,
                    dim=HEAD_DIM,
                    expand_ratio=EXPAND_RATIO,
                    norm=norm,
                    act_func=act_func,
                )
            )
        self.stage = nn.Sequential(*stage)
        self._calibrate_batchnorm()
        self.eval()

    def _calibrate_batchnorm(self):
        bns = [m for m in self.modules() if isinstance(m, nn.BatchNorm2d)]
        self.eval()
        for m in bns:
            m.reset_running_stats()
            m.momentum = 1.0
            m.train()
        with torch.no_grad():
            self.stage(torch.randn(CALIB_BATCH, IN_CHANNELS, CALIB_H, CALIB_W))
        for m in bns:
            m.momentum = 0.1
            m.eval()

    def forward(self, x):
        return self.stage(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, IN_H, IN_W)]


def get_init_inputs():
    return []
