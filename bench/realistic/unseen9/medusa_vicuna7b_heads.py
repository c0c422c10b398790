"""Medusa speculative-decoding heads on Vicuna-7B (Medusa-1: 5 heads, 1 ResBlock each),
following the official FasterDecoding/Medusa repo, medusa/model/medusa_model.py
(ResBlock and the medusa_head ModuleList of nn.Sequential(ResBlock, Linear(hidden,
vocab, bias=False)); the heads' logits are stacked with torch.stack(..., dim=0)).

Use case: the tree-verification step of Medusa decoding: the base model's last
hidden states for the 64 tree candidate tokens (mc_sim_7b_63 tree + root) of one
sequence are fed to all 5 heads, each predicting the token k+1 steps ahead.
Shapes: hidden states (1, 64, 4096) -> logits (5, 1, 64, 32000).
Rough cost: ~95 GFLOP, ~3 GB of fp32 head weights (memory-bound at this token count).

Departures: Medusa initialises each ResBlock linear weight to zero (and copies the base
lm_head into each head) so an untrained head equals the base model; here the ResBlock
weights are normal(0, 0.02) and the lm_head weights normal(0, 0.02) (trained-head-like)
so each head's ResBlock is non-trivial. The base model and its own lm_head are not part
of the task.
"""

import torch
import torch.nn as nn

BATCH = 1
TREE_TOKENS = 64
HIDDEN = 4096
VOCAB = 32000
MEDUSA_NUM_HEADS = 5
MEDUSA_NUM_LAYERS = 1
INIT_STD = 0.02


class ResBlock(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        # Medusa: torch.nn.init.zeros_(self.linear.weight); replaced, see docstring
        nn.init.normal_(self.linear.weight, std=INIT_STD)
        self.act = nn.SiLU()

    def forward(self, x):
        return x + self.act(self.linear(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden_size = HIDDEN
        self.vocab_size = VOCAB
        self.medusa = MEDUSA_NUM_HEADS
        self.medusa_num_layers = MEDUSA_NUM_LAYERS
        self.medusa_head = nn.ModuleList(
            [
                nn.Sequential(
                    *([ResBlock(self.hidden_size)] * MEDUSA_NUM_LAYERS),
                    nn.Linear(self.hidden_size, self.vocab_size, bias=False),
                )
                for _ in range(self.medusa)
            ]
        )
        for head in self.medusa_head:
            nn.init.normal_(head[-1].weight, std=INIT_STD)
        self.eval()

    def forward(self, hidden_states):
        medusa_logits = []
        for i in range(self.medusa):
            medusa_logits.append(self.medusa_head[i](hidden_states))
        return torch.stack(medusa_logits, dim=0)


def get_inputs():
    return [torch.randn(BATCH, TREE_TOKENS, HIDDEN)]


def get_init_inputs():
    return []
