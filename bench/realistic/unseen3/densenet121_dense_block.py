"""DenseNet-121's first dense block (torchvision's _DenseBlock of 6 _DenseLayers, growth rate
32, bottleneck size 4): each layer concatenates every earlier feature map (64 + 32 i channels),
applies BatchNorm (eval) + ReLU + a 1 x 1 Conv2d to 128 channels, BatchNorm + ReLU + a 3 x 3
Conv2d to 32 new channels, and the block returns the concatenation of all 256 channels; batch 16
at 56 x 56 (the 224 x 224 ImageNet input after the stem; vision)."""

import torch
import torch.nn as nn

NUM_LAYERS, NUM_INPUT_FEATURES, BN_SIZE, GROWTH_RATE = 6, 64, 4, 32
BATCH, SIZE = 16, 56


class _DenseLayer(nn.Module):
    def __init__(self, num_input_features, growth_rate, bn_size):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, kernel_size=1, stride=1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(
            bn_size * growth_rate, growth_rate, kernel_size=3, stride=1, padding=1, bias=False
        )

    def bn_function(self, inputs):
        concated_features = torch.cat(inputs, 1)
        bottleneck_output = self.conv1(self.relu1(self.norm1(concated_features)))
        return bottleneck_output

    def forward(self, input):
        prev_features = [input] if isinstance(input, torch.Tensor) else input
        bottleneck_output = self.bn_function(prev_features)
        new_features = self.conv2(self.relu2(self.norm2(bottleneck_output)))
        return new_features


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleDict()
        for i in range(NUM_LAYERS):
            layer = _DenseLayer(NUM_INPUT_FEATURES + i * GROWTH_RATE, GROWTH_RATE, BN_SIZE)
            self.layers.add_module(f"denselayer{i + 1}", layer)
        with torch.no_grad():  # trained statistics
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 2.0)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)

    def forward(self, init_features):
        features = [init_features]
        for _name, layer in self.layers.items():
            new_features = layer(features)
            features.append(new_features)
        return torch.cat(features, 1)


def get_inputs():
    return [
        torch.relu(torch.randn(BATCH, NUM_INPUT_FEATURES, SIZE, SIZE))
    ]  # after the stem's ReLU + max-pool


def get_init_inputs():
    return []
