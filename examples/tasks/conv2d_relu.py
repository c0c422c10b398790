"""2D convolution (stride 1, 'same' padding) followed by ReLU, NCHW.

Compute bound at these sizes: 2 * N * C_out * H * W * C_in * k * k FLOPs. As an implicit
GEMM the output pixels are rows, the output channels columns and C_in * k * k the
reduction; bias and ReLU fuse into the store.
"""

import torch
import torch.nn as nn

batch_size = 16
in_channels = 64
out_channels = 64
height = 56
width = 56
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
