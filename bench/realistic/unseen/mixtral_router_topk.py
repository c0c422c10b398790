"""Mixtral 8x7B's MoE router for one decoding batch: a linear gate from width 4096 to 8 experts,
softmax over the experts, the top 2 kept and renormalised (the weights the experts' outputs are
mixed with), batch 64 sequences x 16 tokens; returns the weights and the expert indices as
float."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden: int = 4096, experts: int = 8, top_k: int = 2):
        super().__init__()
        self.gate = nn.Linear(hidden, experts, bias=False)
        self.top_k = top_k

    def forward(self, x):
        logits = self.gate(x.view(-1, x.shape[-1]))
        weights = torch.softmax(logits, dim=1, dtype=torch.float)
        weights, experts = torch.topk(weights, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights, experts.float()


def get_inputs():
    return [torch.randn(64, 16, 4096)]


def get_init_inputs():
    return []
