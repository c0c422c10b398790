"""Whisper-small's audio encoder stem: Conv1d 80 -> 768 (kernel 3, padding 1), GELU, Conv1d
768 -> 768 (kernel 3, stride 2, padding 1), GELU, transposed to tokens, plus the sinusoidal
position embedding; batch 4 x 3000 mel frames (an LLM-family encoder's first block)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, mels: int = 80, width: int = 768, positions: int = 1500):
        super().__init__()
        self.conv1 = nn.Conv1d(mels, width, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(width, width, kernel_size=3, stride=2, padding=1)
        scales = torch.exp(-torch.log(torch.tensor(10000.0)) / (width // 2 - 1) * torch.arange(width // 2))
        angles = torch.arange(positions)[:, None] * scales[None, :]
        self.register_buffer("position", torch.cat([angles.sin(), angles.cos()], dim=1))

    def forward(self, mel):
        x = nn.functional.gelu(self.conv1(mel))
        x = nn.functional.gelu(self.conv2(x))
        return x.permute(0, 2, 1) + self.position


def get_inputs():
    return [torch.randn(4, 80, 3000)]


def get_init_inputs():
    return []
