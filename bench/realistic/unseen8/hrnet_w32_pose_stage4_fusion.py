"""HRNet-W32 human pose estimation network (Simple/Deep High-Resolution Net, COCO 256x192), its last
stage (stage 4) plus the heatmap head, as the reference code writes it in
deep-high-resolution-net.pytorch lib/models/pose_hrnet.py (PoseHighResolutionNet._make_stage /
HighResolutionModule). Stage 4 has 3 HighResolutionModules with 4 parallel branches at 1/4, 1/8,
1/16, 1/32 resolution (64x48, 32x24, 16x12, 8x6) and 32/64/128/256 channels; each branch runs 4
BasicBlocks (3x3 conv-BatchNorm-ReLU-3x3 conv-BatchNorm + identity, ReLU), then the multi-resolution
fusion sums, for every output branch i, the other branches j brought to its resolution: j > i by
1x1 conv + BatchNorm + nn.Upsample(nearest, x2^(j-i)); j < i by a chain of stride-2 3x3 conv +
BatchNorm (+ReLU except the last); followed by ReLU. The last module only keeps the highest
resolution output (multi_scale_output=False), and final_layer (1x1 conv 32 -> 17) gives the COCO
keypoint heatmaps. BatchNorm in eval mode with non-trivial running statistics; convs use
Kaiming-normal init instead of the repo's N(0, 0.001) so activations and heatmaps keep trained-like
magnitudes.
Inputs are the four post-ReLU branch outputs of stage 3 (transition3 already applied).
Use case: top-down pose estimation serving, batch 16 person crops of 256x192."""

import torch
import torch.nn as nn

BN_MOMENTUM = 0.1
NUM_MODULES = 3
NUM_BRANCHES = 4
NUM_BLOCKS = [4, 4, 4, 4]
NUM_CHANNELS = [32, 64, 128, 256]
NUM_JOINTS = 17
FINAL_CONV_KERNEL = 1
BATCH = 16
IMAGE_H, IMAGE_W = 256, 192
HEATMAP_H, HEATMAP_W = IMAGE_H // 4, IMAGE_W // 4  # 64 x 48


def conv3x3(in_planes, out_planes, stride=1):
    """3x3 convolution with padding"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes, momentum=BN_MOMENTUM)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes, momentum=BN_MOMENTUM)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual
        out = self.relu(out)

        return out


class HighResolutionModule(nn.Module):
    def __init__(
        self,
        num_branches,
        blocks,
        num_blocks,
        num_inchannels,
        num_channels,
        fuse_method,
        multi_scale_output=True,
    ):
        super().__init__()
        self.num_inchannels = num_inchannels
        self.fuse_method = fuse_method
        self.num_branches = num_branches

        self.multi_scale_output = multi_scale_output

        self.branches = self._make_branches(num_branches, blocks, num_blocks, num_channels)
        self.fuse_layers = self._make_fuse_layers()
        self.relu = nn.ReLU(True)

    def _make_one_branch(self, branch_index, block, num_blocks, num_channels, stride=1):
        downsample = None
        if stride != 1 or self.num_inchannels[branch_index] != num_channels[branch_index] * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(
                    self.num_inchannels[branch_index],
                    num_channels[branch_index] * block.expansion,
                    kernel_size=1,
                    stride=stride,
                    bias=False,
                ),
                nn.BatchNorm2d(num_channels[branch_index] * block.expansion, momentum=BN_MOMENTUM),
            )

        layers = []
        layers.append(
            block(self.num_inchannels[branch_index], num_channels[branch_index], stride, downsample)
        )
        self.num_inchannels[branch_index] = num_channels[branch_index] * block.expansion
        for _i in range(1, num_blocks[branch_index]):
            layers.append(block(self.num_inchannels[branch_index], num_channels[branch_index]))

        return nn.Sequential(*layers)

    def _make_branches(self, num_branches, block, num_blocks, num_channels):
        branches = []

        for i in range(num_branches):
            branches.append(self._make_one_branch(i, block, num_blocks, num_channels))

        return nn.ModuleList(branches)

    def _make_fuse_layers(self):
        if self.num_branches == 1:
            return None

        num_branches = self.num_branches
        num_inchannels = self.num_inchannels
        fuse_layers = []
        for i in range(num_branches if self.multi_scale_output else 1):
            fuse_layer = []
            for j in range(num_branches):
                if j > i:
                    fuse_layer.append(
                        nn.Sequential(
                            nn.Conv2d(num_inchannels[j], num_inchannels[i], 1, 1, 0, bias=False),
                            nn.BatchNorm2d(num_inchannels[i]),
                            nn.Upsample(scale_factor=2 ** (j - i), mode="nearest"),
                        )
                    )
                elif j == i:
                    fuse_layer.append(None)
                else:
                    conv3x3s = []
                    for k in range(i - j):
                        if k == i - j - 1:
                            num_outchannels_conv3x3 = num_inchannels[i]
                            conv3x3s.append(
                                nn.Sequential(
                                    nn.Conv2d(
                                        num_inchannels[j], num_outchannels_conv3x3, 3, 2, 1, bias=False
                                    ),
                                    nn.BatchNorm2d(num_outchannels_conv3x3),
                                )
                            )
                        else:
                            num_outchannels_conv3x3 = num_inchannels[j]
                            conv3x3s.append(
                                nn.Sequential(
                                    nn.Conv2d(
                                        num_inchannels[j], num_outchannels_conv3x3, 3, 2, 1, bias=False
                                    ),
                                    nn.BatchNorm2d(num_outchannels_conv3x3),
                                    nn.ReLU(True),
                                )
                            )
                    fuse_layer.append(nn.Sequential(*conv3x3s))
            fuse_layers.append(nn.ModuleList(fuse_layer))

        return nn.ModuleList(fuse_layers)

    def get_num_inchannels(self):
        return self.num_inchannels

    def forward(self, x):
        if self.num_branches == 1:
            return [self.branches[0](x[0])]

        for i in range(self.num_branches):
            x[i] = self.branches[i](x[i])

        x_fuse = []

        for i in range(len(self.fuse_layers)):
            y = x[0] if i == 0 else self.fuse_layers[i][0](x[0])
            for j in range(1, self.num_branches):
                if i == j:
                    y = y + x[j]
                else:
                    y = y + self.fuse_layers[i][j](x[j])
            x_fuse.append(self.relu(y))

        return x_fuse


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        # PoseHighResolutionNet._make_stage(self.stage4_cfg, num_channels, multi_scale_output=False)
        num_inchannels = list(NUM_CHANNELS)
        modules = []
        for i in range(NUM_MODULES):
            # multi_scale_output is only used last module
            reset_multi_scale_output = not (i == NUM_MODULES - 1)
            modules.append(
                HighResolutionModule(
                    NUM_BRANCHES,
                    BasicBlock,
                    NUM_BLOCKS,
                    num_inchannels,
                    NUM_CHANNELS,
                    "SUM",
                    reset_multi_scale_output,
                )
            )
            num_inchannels = modules[-1].get_num_inchannels()
        self.stage4 = nn.Sequential(*modules)
        self.final_layer = nn.Conv2d(
            in_channels=NUM_CHANNELS[0],
            out_channels=NUM_JOINTS,
            kernel_size=FINAL_CONV_KERNEL,
            stride=1,
            padding=1 if FINAL_CONV_KERNEL == 3 else 0,
        )
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                    if m.bias is not None:
                        nn.init.constant_(m.bias, 0)
                elif isinstance(m, nn.BatchNorm2d):  # trained BatchNorm statistics / affine
                    m.weight.uniform_(0.2, 0.6)
                    m.bias.uniform_(-0.2, 0.2)
                    m.running_mean.uniform_(-0.2, 0.2)
                    m.running_var.uniform_(0.5, 2.0)
        self.eval()

    def forward(self, x0, x1, x2, x3):
        # PoseHighResolutionNet.forward after transition3: y_list = self.stage4(x_list)
        x_list = [x0, x1, x2, x3]
        y_list = self.stage4(x_list)
        x = self.final_layer(y_list[0])
        return x


def get_inputs():
    shapes = [(HEATMAP_H // 2**i, HEATMAP_W // 2**i) for i in range(NUM_BRANCHES)]
    return [torch.relu(torch.randn(BATCH, c, h, w)) for c, (h, w) in zip(NUM_CHANNELS, shapes, strict=True)]


def get_init_inputs():
    return []
