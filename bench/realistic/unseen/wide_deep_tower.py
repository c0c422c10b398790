"""A recommender's deep tower (Wide & Deep / DCN style): 26 sparse features, each an embedding
lookup of dimension 32 in its own table of 100k rows, concatenated with 13 dense features, then
an MLP 845 -> 1024 -> 512 -> 256 -> 1 with ReLU; batch 4096."""

import torch
import torch.nn as nn

TABLES, ROWS, DIM, DENSE, BATCH = 26, 100_000, 32, 13, 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(ROWS, DIM) for _ in range(TABLES))
        widths = [TABLES * DIM + DENSE, 1024, 512, 256]
        layers = []
        for a, b in zip(widths[:-1], widths[1:], strict=True):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.mlp = nn.Sequential(*layers, nn.Linear(widths[-1], 1))

    def forward(self, sparse, dense):
        embedded = [table(sparse[:, i]) for i, table in enumerate(self.tables)]
        return self.mlp(torch.cat(embedded + [dense], dim=1))


def get_inputs():
    return [torch.randint(0, ROWS, (BATCH, TABLES)), torch.randn(BATCH, DENSE)]


def get_init_inputs():
    return []
