"""Stable Diffusion v1's VAE decoder mid-block attention (the CompVis/ldm AttnBlock of
AutoencoderKL, single-head spatial self-attention): GroupNorm(32 groups, 512 channels,
eps 1e-6), q, k and v as 1 x 1 Conv2d 512 -> 512, scores by bmm over the 64 x 64 = 4096
positions scaled by 512^-0.5, softmax, values applied by bmm, the 1 x 1 proj_out and the
residual add; decoding 512 x 512 images from their 64 x 64 latents, batch 2 (a vision
attention block over a large spatial map)."""

import torch
import torch.nn as nn

CHANNELS, BATCH, SIZE = 512, 2, 64


def Normalize(in_channels):
    return torch.nn.GroupNorm(num_groups=32, num_channels=in_channels, eps=1e-6, affine=True)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = Normalize(CHANNELS)
        self.q = torch.nn.Conv2d(CHANNELS, CHANNELS, kernel_size=1, stride=1, padding=0)
        self.k = torch.nn.Conv2d(CHANNELS, CHANNELS, kernel_size=1, stride=1, padding=0)
        self.v = torch.nn.Conv2d(CHANNELS, CHANNELS, kernel_size=1, stride=1, padding=0)
        self.proj_out = torch.nn.Conv2d(CHANNELS, CHANNELS, kernel_size=1, stride=1, padding=0)

    def forward(self, x):
        h_ = x
        h_ = self.norm(h_)
        q = self.q(h_)
        k = self.k(h_)
        v = self.v(h_)

        # compute attention
        b, c, h, w = q.shape
        q = q.reshape(b, c, h * w)
        q = q.permute(0, 2, 1)  # b,hw,c
        k = k.reshape(b, c, h * w)  # b,c,hw
        w_ = torch.bmm(q, k)  # b,hw,hw    w[b,i,j]=sum_c q[b,i,c]k[b,c,j]
        w_ = w_ * (int(c) ** (-0.5))
        w_ = torch.nn.functional.softmax(w_, dim=2)

        # attend to values
        v = v.reshape(b, c, h * w)
        w_ = w_.permute(0, 2, 1)  # b,hw,hw (first hw of k, second of q)
        h_ = torch.bmm(v, w_)  # b, c,hw (hw of q) h_[b,c,j] = sum_i v[b,c,i] w_[b,i,j]
        h_ = h_.reshape(b, c, h, w)

        h_ = self.proj_out(h_)
        return x + h_


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return []
