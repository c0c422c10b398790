"""timm's ViT-B/16 with random weights (pretrained=False: nothing downloaded). Needs timm.

kforge model examples/models/vit_b16.py:full   # batch 32 x 3 x 224 x 224
"""

import timm
import torch


def full():
    torch.manual_seed(0)
    return timm.create_model("vit_base_patch16_224", pretrained=False), [torch.randn(32, 3, 224, 224)]
