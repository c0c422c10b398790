"""A language model's training loss read in evaluation: cross-entropy with label smoothing 0.1
over a 32000-token vocabulary (Llama 2's), 4096 positions, mean over positions."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets, label_smoothing=0.1)


def get_inputs():
    return [torch.randn(4096, 32000) * 2, torch.randint(0, 32000, (4096,))]


def get_init_inputs():
    return []
