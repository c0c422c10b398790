"""Mask R-CNN R50-FPN's feature pyramid as torchvision writes it
(torchvision/ops/feature_pyramid_network.py, built by resnet_fpn_backbone / _resnet_fpn_extractor
for maskrcnn_resnet50_fpn): FeaturePyramidNetwork(in_channels_list [256, 512, 1024, 2048],
out_channels 256, extra_blocks LastLevelMaxPool()) over the ResNet-50 body's layer1..layer4
outputs (an OrderedDict "0".."3"). inner_blocks are 1 x 1 Conv2dNormActivation (norm_layer None,
so a Conv2d with bias and no activation), layer_blocks 3 x 3 ones; the top-down pass runs from C5:
inner lateral of each level plus F.interpolate(last_inner, size=lateral.shape[-2:],
mode="nearest"), each sum through its layer block, results.insert(0, ...); LastLevelMaxPool adds
"pool" as F.max_pool2d(P5, kernel_size=1, stride=2, padding=0). A vision (detection) block at
torchvision's COCO inference: batch 2 images resized to 800 x 1066 and batched (padded to a
multiple of 32) to 800 x 1088, so C2..C5 are 200 x 272, 100 x 136, 50 x 68 and 25 x 34."""

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

BATCH, HEIGHT, WIDTH = 2, 800, 1088
IN_CHANNELS_LIST, OUT_CHANNELS, STRIDES = [256, 512, 1024, 2048], 256, (4, 8, 16, 32)


class Conv2dNormActivation(nn.Sequential):
    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size=3,
        stride=1,
        padding=None,
        groups=1,
        norm_layer=nn.BatchNorm2d,
        activation_layer=nn.ReLU,
        dilation=1,
        inplace=True,
        bias=None,
    ):
        if padding is None:
            padding = (kernel_size - 1) // 2 * dilation
        if bias is None:
            bias = norm_layer is None
        layers = [
            nn.Conv2d(
                in_channels,
                out_channels,
                kernel_size,
                stride,
                padding,
                dilation=dilation,
                groups=groups,
                bias=bias,
            )
        ]
        if norm_layer is not None:
            layers.append(norm_layer(out_channels))
        if activation_layer is not None:
            params = {} if inplace is None else {"inplace": inplace}
            layers.append(activation_layer(**params))
        super().__init__(*layers)
        self.out_channels = out_channels


class ExtraFPNBlock(nn.Module):
    """
    Base class for the extra block in the FPN.
    """

    def forward(
        self, results: list[Tensor], x: list[Tensor], names: list[str]
    ) -> tuple[list[Tensor], list[str]]:
        pass


class LastLevelMaxPool(ExtraFPNBlock):
    """
    Applies a max_pool2d (not actual max_pool2d, we just subsample) on top of the last feature map
    """

    def forward(self, x: list[Tensor], y: list[Tensor], names: list[str]) -> tuple[list[Tensor], list[str]]:
        names.append("pool")
        # Use max pooling to simulate stride 2 subsampling
        x.append(F.max_pool2d(x[-1], kernel_size=1, stride=2, padding=0))
        return x, names


class FeaturePyramidNetwork(nn.Module):
    _version = 2

    def __init__(
        self,
        in_channels_list: list[int],
        out_channels: int,
        extra_blocks: ExtraFPNBlock | None = None,
        norm_layer=None,
    ):
        super().__init__()
        self.inner_blocks = nn.ModuleList()
        self.layer_blocks = nn.ModuleList()
        for in_channels in in_channels_list:
            if in_channels == 0:
                raise ValueError("in_channels=0 is currently not supported")
            inner_block_module = Conv2dNormActivation(
                in_channels,
                out_channels,
                kernel_size=1,
                padding=0,
                norm_layer=norm_layer,
                activation_layer=None,
            )
            layer_block_module = Conv2dNormActivation(
                out_channels, out_channels, kernel_size=3, norm_layer=norm_layer, activation_layer=None
            )
            self.inner_blocks.append(inner_block_module)
            self.layer_blocks.append(layer_block_module)

        # initialize parameters now to avoid modifying the initialization of top_blocks
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_uniform_(m.weight, a=1)
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)

        if extra_blocks is not None:
            if not isinstance(extra_blocks, ExtraFPNBlock):
                raise TypeError(f"extra_blocks should be of type ExtraFPNBlock not {type(extra_blocks)}")
        self.extra_blocks = extra_blocks

    def get_result_from_inner_blocks(self, x: Tensor, idx: int) -> Tensor:
        """
        This is equivalent to self.inner_blocks[idx](x),
        but torchscript doesn't support this yet
        """
        num_blocks = len(self.inner_blocks)
        if idx < 0:
            idx += num_blocks
        out = x
        for i, module in enumerate(self.inner_blocks):
            if i == idx:
                out = module(x)
        return out

    def get_result_from_layer_blocks(self, x: Tensor, idx: int) -> Tensor:
        """
        This is equivalent to self.layer_blocks[idx](x),
        but torchscript doesn't support this yet
        """
        num_blocks = len(self.layer_blocks)
        if idx < 0:
            idx += num_blocks
        out = x
        for i, module in enumerate(self.layer_blocks):
            if i == idx:
                out = module(x)
        return out

    def forward(self, x: dict[str, Tensor]) -> dict[str, Tensor]:
        """
        Computes the FPN for a set of feature maps.

        Args:
            x (OrderedDict[Tensor]): feature maps for each feature level.

        Returns:
            results (OrderedDict[Tensor]): feature maps after FPN layers.
                They are ordered from the highest resolution first.
        """
        # unpack OrderedDict into two lists for easier handling
        names = list(x.keys())
        x = list(x.values())

        last_inner = self.get_result_from_inner_blocks(x[-1], -1)
        results = []
        results.append(self.get_result_from_layer_blocks(last_inner, -1))

        for idx in range(len(x) - 2, -1, -1):
            inner_lateral = self.get_result_from_inner_blocks(x[idx], idx)
            feat_shape = inner_lateral.shape[-2:]
            inner_top_down = F.interpolate(last_inner, size=feat_shape, mode="nearest")
            last_inner = inner_lateral + inner_top_down
            results.insert(0, self.get_result_from_layer_blocks(last_inner, idx))

        if self.extra_blocks is not None:
            results, names = self.extra_blocks(results, x, names)

        # make it back an OrderedDict
        out = OrderedDict([(k, v) for k, v in zip(names, results, strict=False)])

        return out


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fpn = FeaturePyramidNetwork(
            in_channels_list=IN_CHANNELS_LIST,
            out_channels=OUT_CHANNELS,
            extra_blocks=LastLevelMaxPool(),
            norm_layer=None,
        )
        with torch.no_grad():  # trained biases
            for m in self.modules():
                if isinstance(m, nn.Conv2d) and m.bias is not None:
                    m.bias.uniform_(-0.1, 0.1)

    def forward(self, c2, c3, c4, c5):
        # BackboneWithFPN: IntermediateLayerGetter's OrderedDict, then the FPN
        x = OrderedDict([("0", c2), ("1", c3), ("2", c4), ("3", c5)])
        out = self.fpn(x)
        return tuple(out.values())


def get_inputs():
    # the ResNet-50 body's layer1..layer4 outputs (after ReLU, so non-negative)
    return [
        torch.relu(torch.randn(BATCH, channels, HEIGHT // stride, WIDTH // stride))
        for channels, stride in zip(IN_CHANNELS_LIST, STRIDES, strict=True)
    ]


def get_init_inputs():
    return []
