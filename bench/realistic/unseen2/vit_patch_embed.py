"""ViT-B/16's patch embedding (timm's PatchEmbed and the token prefix): Conv2d 3 -> 768 with
kernel and stride 16, flattened to 196 tokens, the class token prepended and the learnt position
embedding added; batch 64 at 224 x 224 (vision)."""

import torch
import torch.nn as nn

WIDTH, PATCH, SIDE = 768, 16, 224


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, WIDTH, kernel_size=PATCH, stride=PATCH)
        tokens = (SIDE // PATCH) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, WIDTH) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens + 1, WIDTH) * 0.02)

    def forward(self, x):
        x = self.proj(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        return x + self.pos_embed


def get_inputs():
    return [torch.randn(64, 3, SIDE, SIDE)]


def get_init_inputs():
    return []
