"""torchvision's DeepLabV3-ResNet50 segmentation head (torchvision/models/segmentation/deeplabv3.py):
DeepLabHead = ASPP(2048, rates (12, 24, 36)) -> 3x3 conv 256 + BN + ReLU -> 1x1 conv to 21 VOC
classes, then _SimpleSegmentationModel's bilinear upsampling (align_corners=False) of the logits
back to the input resolution. ASPP has five branches: 1x1 conv, three dilated 3x3 convs
(padding = dilation), and ASPPPooling (global average pool -> 1x1 conv -> BN -> ReLU ->
F.interpolate back to the map size); the 5 x 256 channels are concatenated and projected by
1x1 conv + BN + ReLU + Dropout(0.5) (inactive at inference). BatchNorm in eval mode with
trained-looking running statistics. Input is the output-stride-8 ResNet-50 layer4 feature map
(post-ReLU) for 520x520 images (65x65x2048), as in torchvision's reference evaluation.
Use case: semantic segmentation serving, batch 2 images."""

import torch
import torch.nn as nn
import torch.nn.functional as F

IN_CHANNELS = 2048
ATROUS_RATES = (12, 24, 36)
OUT_CHANNELS = 256
NUM_CLASSES = 21
BATCH, IMG_SIZE, FEAT_SIZE = 2, 520, 65


class ASPPConv(nn.Sequential):
    def __init__(self, in_channels, out_channels, dilation):
        modules = [
            nn.Conv2d(in_channels, out_channels, 3, padding=dilation, dilation=dilation, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(),
        ]
        super().__init__(*modules)


class ASPPPooling(nn.Sequential):
    def __init__(self, in_channels, out_channels):
        super().__init__(
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(in_channels, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(),
        )

    def forward(self, x):
        size = x.shape[-2:]
        for mod in self:
            x = mod(x)
        return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


class ASPP(nn.Module):
    def __init__(self, in_channels, atrous_rates, out_channels=256):
        super().__init__()
        modules = []
        modules.append(
            nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, bias=False), nn.BatchNorm2d(out_channels), nn.ReLU()
            )
        )

        rates = tuple(atrous_rates)
        for rate in rates:
            modules.append(ASPPConv(in_channels, out_channels, rate))

        modules.append(ASPPPooling(in_channels, out_channels))

        self.convs = nn.ModuleList(modules)

        self.project = nn.Sequential(
            nn.Conv2d(len(self.convs) * out_channels, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(),
            nn.Dropout(0.5),
        )

    def forward(self, x):
        _res = []
        for conv in self.convs:
            _res.append(conv(x))
        res = torch.cat(_res, dim=1)
        return self.project(res)


class DeepLabHead(nn.Sequential):
    def __init__(self, in_channels, num_classes, atrous_rates=(12, 24, 36)):
        super().__init__(
            ASPP(in_channels, atrous_rates),
            nn.Conv2d(256, 256, 3, padding=1, bias=False),
            nn.BatchNorm2d(256),
            nn.ReLU(),
            nn.Conv2d(256, num_classes, 1),
        )


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.classifier = DeepLabHead(IN_CHANNELS, NUM_CLASSES, ATROUS_RATES)
        with torch.no_grad():  # trained BatchNorm statistics / affine
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)
                    m.running_mean.uniform_(-0.2, 0.2)
                    m.running_var.uniform_(0.5, 2.0)
            self.classifier[-1].weight.mul_(20.0)  # trained classifier: logits of O(1) rather than O(0.05)
        self.eval()

    def forward(self, features):
        # _SimpleSegmentationModel.forward after the backbone (features["out"]), aux head off
        input_shape = (IMG_SIZE, IMG_SIZE)
        x = self.classifier(features)
        x = F.interpolate(x, size=input_shape, mode="bilinear", align_corners=False)
        return x


def get_inputs():
    return [torch.relu(torch.randn(BATCH, IN_CHANNELS, FEAT_SIZE, FEAT_SIZE))]


def get_init_inputs():
    return []
