"""YOLOX-L decoupled detection head with inference-time box decoding, following the
official Megvii-BaseDetection/YOLOX repo: yolox/models/yolo_head.py (YOLOXHead,
forward in eval mode + decode_outputs) and yolox/models/network_blocks.py (BaseConv =
Conv2d(bias=False) + BatchNorm2d + SiLU).

For each FPN level (strides 8/16/32) a 1x1 stem to 256 channels, then two parallel
branches of two 3x3 BaseConvs (classification / regression), 1x1 prediction convs for
80 class scores, 4 box offsets and 1 objectness; sigmoid on scores, concatenation of
all 8400 anchor points and grid/stride decoding (xy offset + grid, exp(wh)) * stride.
Shapes: COCO evaluation at 640x640, batch 8: PAFPN outputs (8,256,80,80),
(8,512,40,40), (8,1024,20,20) -> (8, 8400, 85). Rough cost: ~330 GFLOP.

BatchNorm: eps 1e-3, momentum 0.03 as YOLOX's init_yolo sets; running statistics come
from a calibration pass in __init__ (one forward of random features with the
BatchNorm layers in train mode and momentum=1.0), then eval. Conv weights keep
PyTorch's default init (YOLOX does not re-initialise them); prediction biases use
initialize_biases(prior_prob=1e-2).

Departures: decode_outputs builds the grids with torch.arange(..., device=outputs.device)
and casts with .to(dtype) instead of .type(xin[0].type()) (the string type cast cannot
target the meta device); same values.
"""

import math

import torch
import torch.nn as nn

BATCH = 8
NUM_CLASSES = 80
WIDTH = 1.0
IN_CHANNELS = [256, 512, 1024]
STRIDES = [8, 16, 32]
IMG_SIZE = 640
PRIOR_PROB = 1e-2
BN_EPS = 1e-3
BN_MOMENTUM = 0.03
CALIB_BATCH = 1


def get_activation(name="silu", inplace=True):
    if name == "silu":
        module = nn.SiLU(inplace=inplace)
    elif name == "relu":
        module = nn.ReLU(inplace=inplace)
    elif name == "lrelu":
        module = nn.LeakyReLU(0.1, inplace=inplace)
    else:
        raise AttributeError(f"Unsupported act type: {name}")
    return module


class BaseConv(nn.Module):
    """A Conv2d -> Batchnorm -> silu/leaky relu block"""

    def __init__(self, in_channels, out_channels, ksize, stride, groups=1, bias=False, act="silu"):
        super().__init__()
        pad = (ksize - 1) // 2
        self.conv = nn.Conv2d(
            in_channels, out_channels, kernel_size=ksize, stride=stride, padding=pad, groups=groups, bias=bias
        )
        self.bn = nn.BatchNorm2d(out_channels)
        self.act = get_activation(act, inplace=True)

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class YOLOXHead(nn.Module):
    def __init__(self, num_classes, width=1.0, strides=[8, 16, 32], in_channels=[256, 512, 1024], act="silu"):  # noqa: B006
        super().__init__()
        self.num_classes = num_classes
        self.decode_in_inference = True
        self.n_anchors = 1

        self.cls_convs = nn.ModuleList()
        self.reg_convs = nn.ModuleList()
        self.cls_preds = nn.ModuleList()
        self.reg_preds = nn.ModuleList()
        self.obj_preds = nn.ModuleList()
        self.stems = nn.ModuleList()
        Conv = BaseConv

        for i in range(len(in_channels)):
            self.stems.append(
                BaseConv(
                    in_channels=int(in_channels[i] * width),
                    out_channels=int(256 * width),
                    ksize=1,
                    stride=1,
                    act=act,
                )
            )
            self.cls_convs.append(
                nn.Sequential(
                    *[
                        Conv(
                            in_channels=int(256 * width),
                            out_channels=int(256 * width),
                            ksize=3,
                            stride=1,
                            act=act,
                        ),
                        Conv(
                            in_channels=int(256 * width),
                            out_channels=int(256 * width),
                            ksize=3,
                            stride=1,
                            act=act,
                        ),
                    ]
                )
            )
            self.reg_convs.append(
                nn.Sequential(
                    *[
                        Conv(
                            in_channels=int(256 * width),
                            out_channels=int(256 * width),
                            ksize=3,
                            stride=1,
                            act=act,
                        ),
                        Conv(
                            in_channels=int(256 * width),
                            out_channels=int(256 * width),
                            ksize=3,
                            stride=1,
                            act=act,
                        ),
                    ]
                )
            )
            self.cls_preds.append(
                nn.Conv2d(
                    in_channels=int(256 * width),
                    out_channels=self.n_anchors * self.num_classes,
                    kernel_size=1,
                    stride=1,
                    padding=0,
                )
            )
            self.reg_preds.append(
                nn.Conv2d(in_channels=int(256 * width), out_channels=4, kernel_size=1, stride=1, padding=0)
            )
            self.obj_preds.append(
                nn.Conv2d(
                    in_channels=int(256 * width),
                    out_channels=self.n_anchors * 1,
                    kernel_size=1,
                    stride=1,
                    padding=0,
                )
            )
        self.strides = strides

    def initialize_biases(self, prior_prob):
        for conv in self.cls_preds:
            b = conv.bias.view(self.n_anchors, -1)
            b.data.fill_(-math.log((1 - prior_prob) / prior_prob))
            conv.bias = torch.nn.Parameter(b.view(-1), requires_grad=True)
        for conv in self.obj_preds:
            b = conv.bias.view(self.n_anchors, -1)
            b.data.fill_(-math.log((1 - prior_prob) / prior_prob))
            conv.bias = torch.nn.Parameter(b.view(-1), requires_grad=True)

    def forward(self, xin):
        outputs = []
        for k, (cls_conv, reg_conv, stride_this_level, x) in enumerate(  # noqa: B007
            zip(self.cls_convs, self.reg_convs, self.strides, xin, strict=False)
        ):
            x = self.stems[k](x)
            cls_x = x
            reg_x = x

            cls_feat = cls_conv(cls_x)
            cls_output = self.cls_preds[k](cls_feat)

            reg_feat = reg_conv(reg_x)
            reg_output = self.reg_preds[k](reg_feat)
            obj_output = self.obj_preds[k](reg_feat)

            output = torch.cat([reg_output, obj_output.sigmoid(), cls_output.sigmoid()], 1)
            outputs.append(output)

        self.hw = [x.shape[-2:] for x in outputs]
        # [batch, n_anchors_all, 85]
        outputs = torch.cat([x.flatten(start_dim=2) for x in outputs], dim=2).permute(0, 2, 1)
        if self.decode_in_inference:
            return self.decode_outputs(outputs, dtype=xin[0].dtype)
        else:
            return outputs

    def decode_outputs(self, outputs, dtype):
        grids = []
        strides = []
        for (hsize, wsize), stride in zip(self.hw, self.strides, strict=False):
            yv, xv = torch.meshgrid(
                [torch.arange(hsize, device=outputs.device), torch.arange(wsize, device=outputs.device)],
                indexing="ij",
            )
            grid = torch.stack((xv, yv), 2).view(1, -1, 2)
            grids.append(grid)
            shape = grid.shape[:2]
            strides.append(torch.full((*shape, 1), stride, device=outputs.device))

        grids = torch.cat(grids, dim=1).to(dtype)
        strides = torch.cat(strides, dim=1).to(dtype)

        outputs = torch.cat(
            [(outputs[..., 0:2] + grids) * strides, torch.exp(outputs[..., 2:4]) * strides, outputs[..., 4:]],
            dim=-1,
        )
        return outputs


def _feature_shapes(batch):
    return [
        (batch, int(c * WIDTH), IMG_SIZE // s, IMG_SIZE // s)
        for c, s in zip(IN_CHANNELS, STRIDES, strict=False)
    ]


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = YOLOXHead(NUM_CLASSES, width=WIDTH, strides=STRIDES, in_channels=IN_CHANNELS, act="silu")
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eps = BN_EPS
                m.momentum = BN_MOMENTUM
        self.head.initialize_biases(PRIOR_PROB)
        self._calibrate_batchnorm()
        self.eval()

    def _calibrate_batchnorm(self):
        bns = [m for m in self.modules() if isinstance(m, nn.BatchNorm2d)]
        self.eval()
        for m in bns:
            m.reset_running_stats()
            m.momentum = 1.0  # one calibration batch: running stats = its batch statistics
            m.train()
        calib = [torch.randn(*s) for s in _feature_shapes(CALIB_BATCH)]
        with torch.no_grad():
            self.head(calib)
        for m in bns:
            m.momentum = BN_MOMENTUM
            m.eval()

    def forward(self, x_s8, x_s16, x_s32):
        return self.head([x_s8, x_s16, x_s32])


def get_inputs():
    return [torch.randn(*s) for s in _feature_shapes(BATCH)]


def get_init_inputs():
    return []
