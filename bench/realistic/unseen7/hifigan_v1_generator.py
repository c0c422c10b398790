"""HiFi-GAN V1 generator (jik876/hifi-gan, models.py Generator with ResBlock1; config_v1.json:
upsample_rates [8, 8, 2, 2], upsample_kernel_sizes [16, 16, 4, 4], upsample_initial_channel 512,
resblock_kernel_sizes [3, 7, 11], resblock_dilation_sizes [[1, 3, 5]] x 3) after
remove_weight_norm(), i.e. plain Conv1d / ConvTranspose1d. mel (80 bins) -> conv_pre k7 -> 4 x
[leaky_relu(0.1) -> ConvTranspose1d upsample -> multi-receptive-field fusion: mean of 3 ResBlock1
(each 3 x [leaky_relu -> dilated conv -> leaky_relu -> conv -> residual])] -> leaky_relu with the
default 0.01 slope (a quirk of the original) -> conv_post k7 -> tanh. Channels 512 -> 256 -> 128 ->
64 -> 32 while time grows 256x (hop size 256 at 22.05 kHz). Use case: TTS vocoder serving, one
utterance of 256 mel frames (~3 s of audio, 65536 samples)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import Conv1d, ConvTranspose1d

LRELU_SLOPE = 0.1
NUM_MELS = 80
UPSAMPLE_RATES = (8, 8, 2, 2)
UPSAMPLE_KERNEL_SIZES = (16, 16, 4, 4)
UPSAMPLE_INITIAL_CHANNEL = 512
RESBLOCK_KERNEL_SIZES = (3, 7, 11)
RESBLOCK_DILATION_SIZES = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
BATCH, MEL_FRAMES = 1, 256


def get_padding(kernel_size, dilation=1):
    return int((kernel_size * dilation - dilation) / 2)


class ResBlock1(torch.nn.Module):
    def __init__(self, channels, kernel_size=3, dilation=(1, 3, 5)):
        super().__init__()
        self.convs1 = nn.ModuleList(
            [
                Conv1d(
                    channels,
                    channels,
                    kernel_size,
                    1,
                    dilation=dilation[0],
                    padding=get_padding(kernel_size, dilation[0]),
                ),
                Conv1d(
                    channels,
                    channels,
                    kernel_size,
                    1,
                    dilation=dilation[1],
                    padding=get_padding(kernel_size, dilation[1]),
                ),
                Conv1d(
                    channels,
                    channels,
                    kernel_size,
                    1,
                    dilation=dilation[2],
                    padding=get_padding(kernel_size, dilation[2]),
                ),
            ]
        )

        self.convs2 = nn.ModuleList(
            [
                Conv1d(channels, channels, kernel_size, 1, dilation=1, padding=get_padding(kernel_size, 1)),
                Conv1d(channels, channels, kernel_size, 1, dilation=1, padding=get_padding(kernel_size, 1)),
                Conv1d(channels, channels, kernel_size, 1, dilation=1, padding=get_padding(kernel_size, 1)),
            ]
        )

    def forward(self, x):
        for c1, c2 in zip(self.convs1, self.convs2, strict=False):
            xt = F.leaky_relu(x, LRELU_SLOPE)
            xt = c1(xt)
            xt = F.leaky_relu(xt, LRELU_SLOPE)
            xt = c2(xt)
            x = xt + x
        return x


class Generator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.num_kernels = len(RESBLOCK_KERNEL_SIZES)
        self.num_upsamples = len(UPSAMPLE_RATES)
        self.conv_pre = Conv1d(NUM_MELS, UPSAMPLE_INITIAL_CHANNEL, 7, 1, padding=3)
        resblock = ResBlock1

        self.ups = nn.ModuleList()
        for i, (u, k) in enumerate(zip(UPSAMPLE_RATES, UPSAMPLE_KERNEL_SIZES, strict=False)):
            self.ups.append(
                ConvTranspose1d(
                    UPSAMPLE_INITIAL_CHANNEL // (2**i),
                    UPSAMPLE_INITIAL_CHANNEL // (2 ** (i + 1)),
                    k,
                    u,
                    padding=(k - u) // 2,
                )
            )

        self.resblocks = nn.ModuleList()
        for i in range(len(self.ups)):
            ch = UPSAMPLE_INITIAL_CHANNEL // (2 ** (i + 1))
            for _j, (k, d) in enumerate(zip(RESBLOCK_KERNEL_SIZES, RESBLOCK_DILATION_SIZES, strict=False)):
                self.resblocks.append(resblock(ch, k, d))

        self.conv_post = Conv1d(ch, 1, 7, 1, padding=3)

    def forward(self, x):
        x = self.conv_pre(x)
        for i in range(self.num_upsamples):
            x = F.leaky_relu(x, LRELU_SLOPE)
            x = self.ups[i](x)
            xs = None
            for j in range(self.num_kernels):
                if xs is None:
                    xs = self.resblocks[i * self.num_kernels + j](x)
                else:
                    xs += self.resblocks[i * self.num_kernels + j](x)
            x = xs / self.num_kernels
        x = F.leaky_relu(x)
        x = self.conv_post(x)
        x = torch.tanh(x)

        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.generator = Generator()
        with torch.no_grad():
            # Trained-looking scales (what remove_weight_norm leaves, w = g * v / ||v||): with PyTorch's
            # default init every ConvTranspose1d upsampler shrinks the signal ~12x and the waveform
            # vanishes, so the upsamplers get He-like gain (x sqrt(3 * stride)) and the MRF convs x1.5.
            for up, u in zip(self.generator.ups, UPSAMPLE_RATES, strict=False):
                up.weight.mul_(math.sqrt(3 * u))
            for rb in self.generator.resblocks:
                for c in list(rb.convs1) + list(rb.convs2):
                    c.weight.mul_(1.5)
        self.eval()

    def forward(self, mel):
        return self.generator(mel)


def get_inputs():
    return [torch.randn(BATCH, NUM_MELS, MEL_FRAMES)]


def get_init_inputs():
    return []
