"""A recommender's sparse lookup: EmbeddingBag (sum) over a 2M x 64 table, 8192 bags of 40
indices each (ragged bags given as offsets, as TorchRec passes them), with per-sample weights
off."""

import torch
import torch.nn as nn

ROWS, DIM, BAGS, PER_BAG = 2_000_000, 64, 8192, 40


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(ROWS, DIM, mode="sum")

    def forward(self, indices, offsets):
        return self.bag(indices, offsets)


def get_inputs():
    generator = torch.Generator().manual_seed(0)  # the same bag sizes every call: fixed shapes
    lengths = torch.randint(1, 2 * PER_BAG, (BAGS,), generator=generator, device="cpu")
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)[:-1]])
    indices = torch.randint(0, ROWS, (int(lengths.sum()),))
    return [indices, offsets.to(indices.device)]


def get_init_inputs():
    return []
