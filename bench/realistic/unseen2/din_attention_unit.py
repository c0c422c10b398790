"""Deep Interest Network's local activation unit (a recommender's attention over a user's
behaviour sequence): the candidate item's embedding against each of 100 past items, an MLP over
[query, key, query - key, query * key] (256 -> 80 -> 40 -> 1, PReLU), the weights masked past
each user's history length and used to sum the behaviours; batch 2048, embedding 64."""

import torch
import torch.nn as nn

BATCH, LENGTH, DIM = 2048, 100, 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(4 * DIM, 80), nn.PReLU(), nn.Linear(80, 40), nn.PReLU(), nn.Linear(40, 1)
        )

    def forward(self, query, keys, lengths):
        q = query[:, None, :].expand_as(keys)
        weights = self.mlp(torch.cat([q, keys, q - keys, q * keys], dim=-1)).squeeze(-1)
        mask = torch.arange(keys.shape[1], device=keys.device)[None, :] < lengths[:, None]
        weights = torch.where(mask, weights, torch.zeros_like(weights))
        return torch.bmm(weights[:, None, :], keys).squeeze(1)


def get_inputs():
    return [torch.randn(BATCH, DIM), torch.randn(BATCH, LENGTH, DIM), torch.randint(1, LENGTH + 1, (BATCH,))]


def get_init_inputs():
    return []
