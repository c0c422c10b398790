"""DeepFM's forward for click-through prediction (a recommender, Criteo-like): 39 categorical
fields of 10000 values each looked up in one shared table through per-field offsets, the
first-order weights summed, the factorisation machine's second-order term (square of sum minus
sum of squares over 16-dim embeddings) and a DNN 624 -> 400 -> 400 -> 400 -> 1 on the
concatenated embeddings, added and passed through a sigmoid; batch 8192."""

import torch
import torch.nn as nn

FIELDS, VALUES, DIM, BATCH = 39, 10000, 16, 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(FIELDS * VALUES, DIM)
        self.linear = nn.Embedding(FIELDS * VALUES, 1)
        self.bias = nn.Parameter(torch.zeros(1))
        nn.init.normal_(self.embedding.weight, std=0.01)  # DeepCTR's small initialisation
        nn.init.normal_(self.linear.weight, std=0.01)
        self.register_buffer("offsets", torch.arange(FIELDS) * VALUES)
        self.dnn = nn.Sequential(
            nn.Linear(FIELDS * DIM, 400), nn.ReLU(),
            nn.Linear(400, 400), nn.ReLU(),
            nn.Linear(400, 400), nn.ReLU(),
            nn.Linear(400, 1),
        )  # fmt: skip

    def forward(self, fields):
        index = fields + self.offsets[None, :]
        emb = self.embedding(index)  # (batch, fields, dim)
        first = self.linear(index).sum(dim=1) + self.bias
        second = 0.5 * (emb.sum(dim=1).pow(2) - emb.pow(2).sum(dim=1)).sum(dim=1, keepdim=True)
        deep = self.dnn(emb.flatten(1))
        return torch.sigmoid(first + second + deep)


def get_inputs():
    return [torch.randint(0, VALUES, (BATCH, FIELDS))]


def get_init_inputs():
    return []
