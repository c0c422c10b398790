"""FCOS detection head (torchvision fcos_resnet50_fpn) over five FPN levels.

Model / block
    FCOS anchor-free detector (Tian et al. 2019) as shipped in torchvision
    (`fcos_resnet50_fpn`, COCO, 91 classes): the shared `FCOSHead` applied to
    every FPN level P3..P7.  Classification tower: 4 x (3x3 conv 256->256,
    GroupNorm(32), ReLU) -> 3x3 conv to 91 logits; regression tower: same 4
    layers -> 3x3 conv to 4 box distances (+ReLU) and 3x3 conv to 1
    centerness logit.  Each output is permuted from (N, A*K, H, W) to
    (N, HWA, K) and the levels are concatenated.

Upstream code followed
    torchvision `torchvision/models/detection/fcos.py`: FCOSHead,
    FCOSClassificationHead, FCOSRegressionHead (forward loops over the feature
    list, view/permute/reshape per level, torch.cat over levels), including its
    init (normal std 0.01 convs, prior-probability 0.01 bias on cls_logits).

Use case and shapes
    COCO inference with torchvision's default transform (min_size 800,
    max_size 1333, size_divisible 32): an 800x1333 image is batched as
    800x1344, so the FPN levels are 100x168, 50x84, 25x42, 13x21, 7x11
    (22400 locations per image), 256 channels; batch 2 images.

    inputs : p3 (2, 256, 100, 168), p4 (2, 256, 50, 84), p5 (2, 256, 25, 42),
             p6 (2, 256, 13, 21), p7 (2, 256, 7, 11), float32
    output : float32 (2, 22400, 96) = cat([cls_logits (91), bbox_regression (4),
             bbox_ctrness (1)], dim=-1)

Cost (rough)
    Parameters 4.95 M (19.8 MB fp32).
    FLOPs per location: 8 tower convs 8*2*256*256*9 = 9.4 MFLOP, cls conv
    2*256*91*9 = 0.42 MFLOP, box+ctrness 0.03 MFLOP; x 44800 locations =
    443 GFLOP (~11 ms at 40 TFLOP/s).  Bytes: inputs 92 MB, each tower
    activation 92 MB per level set, 8 convs + 8 GN + 8 ReLU passes per tower:
    ~3 GB moved.

Departures:
    - Only the head: no backbone / FPN / anchor generation / box decoding /
      postprocessing; the five FPN maps are separate forward arguments instead
      of a list.
    - The head's dict {"cls_logits", "bbox_regression", "bbox_ctrness"} is
      returned as one tensor concatenated along the last dim (91 + 4 + 1).
    - Init: torchvision's (normal std 0.01 weights, prior bias
      -log(99) on cls_logits) except that the zero biases of the tower convs,
      bbox_reg and bbox_ctrness are set to U(-0.1, 0.1) and the GroupNorm
      affine parameters (1 / 0) to 1 + U(-0.2, 0.2) / U(-0.2, 0.2), so no bias
      or affine is a no-op.
"""

import math
from functools import partial

import torch
import torch.nn as nn

IN_CHANNELS = 256
NUM_ANCHORS = 1
NUM_CLASSES = 91
NUM_CONVS = 4

BATCH = 2
LEVEL_SHAPES = ((100, 168), (50, 84), (25, 42), (13, 21), (7, 11))


class FCOSClassificationHead(nn.Module):
    def __init__(
        self, in_channels, num_anchors, num_classes, num_convs=4, prior_probability=0.01, norm_layer=None
    ):
        super().__init__()

        self.num_classes = num_classes
        self.num_anchors = num_anchors

        if norm_layer is None:
            norm_layer = partial(nn.GroupNorm, 32)

        conv = []
        for _ in range(num_convs):
            conv.append(nn.Conv2d(in_channels, in_channels, kernel_size=3, stride=1, padding=1))
            conv.append(norm_layer(in_channels))
            conv.append(nn.ReLU())
        self.conv = nn.Sequential(*conv)

        for layer in self.conv.children():
            if isinstance(layer, nn.Conv2d):
                torch.nn.init.normal_(layer.weight, std=0.01)
                torch.nn.init.constant_(layer.bias, 0)

        self.cls_logits = nn.Conv2d(
            in_channels, num_anchors * num_classes, kernel_size=3, stride=1, padding=1
        )
        torch.nn.init.normal_(self.cls_logits.weight, std=0.01)
        torch.nn.init.constant_(self.cls_logits.bias, -math.log((1 - prior_probability) / prior_probability))

    def forward(self, x):
        all_cls_logits = []

        for features in x:
            cls_logits = self.conv(features)
            cls_logits = self.cls_logits(cls_logits)

            # Permute classification output from (N, A * K, H, W) to (N, HWA, K).
            N, _, H, W = cls_logits.shape
            cls_logits = cls_logits.view(N, -1, self.num_classes, H, W)
            cls_logits = cls_logits.permute(0, 3, 4, 1, 2)
            cls_logits = cls_logits.reshape(N, -1, self.num_classes)  # Size=(N, HWA, 4)

            all_cls_logits.append(cls_logits)

        return torch.cat(all_cls_logits, dim=1)


class FCOSRegressionHead(nn.Module):
    def __init__(self, in_channels, num_anchors, num_convs=4, norm_layer=None):
        super().__init__()

        if norm_layer is None:
            norm_layer = partial(nn.GroupNorm, 32)

        conv = []
        for _ in range(num_convs):
            conv.append(nn.Conv2d(in_channels, in_channels, kernel_size=3, stride=1, padding=1))
            conv.append(norm_layer(in_channels))
            conv.append(nn.ReLU())
        self.conv = nn.Sequential(*conv)

        self.bbox_reg = nn.Conv2d(in_channels, num_anchors * 4, kernel_size=3, stride=1, padding=1)
        self.bbox_ctrness = nn.Conv2d(in_channels, num_anchors * 1, kernel_size=3, stride=1, padding=1)
        for layer in [self.bbox_reg, self.bbox_ctrness]:
            torch.nn.init.normal_(layer.weight, std=0.01)
            torch.nn.init.zeros_(layer.bias)

        for layer in self.conv.children():
            if isinstance(layer, nn.Conv2d):
                torch.nn.init.normal_(layer.weight, std=0.01)
                torch.nn.init.zeros_(layer.bias)

    def forward(self, x):
        all_bbox_regression = []
        all_bbox_ctrness = []

        for features in x:
            bbox_feature = self.conv(features)
            bbox_regression = nn.functional.relu(self.bbox_reg(bbox_feature))
            bbox_ctrness = self.bbox_ctrness(bbox_feature)

            # permute bbox regression output from (N, 4 * A, H, W) to (N, HWA, 4).
            N, _, H, W = bbox_regression.shape
            bbox_regression = bbox_regression.view(N, -1, 4, H, W)
            bbox_regression = bbox_regression.permute(0, 3, 4, 1, 2)
            bbox_regression = bbox_regression.reshape(N, -1, 4)  # Size=(N, HWA, 4)
            all_bbox_regression.append(bbox_regression)

            # permute bbox ctrness output from (N, 1 * A, H, W) to (N, HWA, 1).
            bbox_ctrness = bbox_ctrness.view(N, -1, 1, H, W)
            bbox_ctrness = bbox_ctrness.permute(0, 3, 4, 1, 2)
            bbox_ctrness = bbox_ctrness.reshape(N, -1, 1)
            all_bbox_ctrness.append(bbox_ctrness)

        return torch.cat(all_bbox_regression, dim=1), torch.cat(all_bbox_ctrness, dim=1)


class FCOSHead(nn.Module):
    def __init__(self, in_channels, num_anchors, num_classes, num_convs=4):
        super().__init__()
        self.classification_head = FCOSClassificationHead(in_channels, num_anchors, num_classes, num_convs)
        self.regression_head = FCOSRegressionHead(in_channels, num_anchors, num_convs)

    def forward(self, x):
        cls_logits = self.classification_head(x)
        bbox_regression, bbox_ctrness = self.regression_head(x)
        return {
            "cls_logits": cls_logits,
            "bbox_regression": bbox_regression,
            "bbox_ctrness": bbox_ctrness,
        }


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = FCOSHead(IN_CHANNELS, NUM_ANCHORS, NUM_CLASSES, NUM_CONVS)
        with torch.no_grad():
            for m in self.head.modules():
                if isinstance(m, nn.Conv2d) and m is not self.head.classification_head.cls_logits:
                    m.bias.uniform_(-0.1, 0.1)
                elif isinstance(m, nn.GroupNorm):
                    m.weight.add_(torch.empty_like(m.weight).uniform_(-0.2, 0.2))
                    m.bias.uniform_(-0.2, 0.2)
        self.eval()

    def forward(self, p3, p4, p5, p6, p7):
        out = self.head([p3, p4, p5, p6, p7])
        return torch.cat([out["cls_logits"], out["bbox_regression"], out["bbox_ctrness"]], dim=-1)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, h, w, dtype=torch.float32) for h, w in LEVEL_SHAPES]


def get_init_inputs():
    return []
