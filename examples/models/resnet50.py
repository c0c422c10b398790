"""torchvision's ResNet-50 with random weights (weights=None: nothing downloaded). Needs
torchvision (on the GPU box; PyPI's wheel does not load beside the CPU build of torch).

    kforge model examples/models/resnet50.py:full  # batch 32 x 3 x 224 x 224
"""

import torch
from torchvision.models import resnet50


def full():
    torch.manual_seed(0)
    return resnet50(weights=None), [torch.randn(32, 3, 224, 224)]
