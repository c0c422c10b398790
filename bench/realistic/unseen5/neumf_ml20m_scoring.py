"""NeuMF (neural collaborative filtering, a recommender) as the MLPerf reference writes it
(mlcommons/training recommendation/pytorch/neumf.py) at its MovieLens-20M configuration: 138,493
users and 26,744 items; the GMF branch (mf_user_embed and mf_item_embed of width 64, multiplied
elementwise) and the MLP branch (mlp_user_embed and mlp_item_embed of width 128, concatenated to
256, then Linear + ReLU 256 -> 256 -> 128 -> 64), concatenated to 128, final Linear 128 -> 1 and
sigmoid (the evaluation call, sigmoid=True). Scoring batch: 100 users, each against its
held-out positive and 999 sampled negatives (100,000 user-item rows), as the MLPerf hit-rate@10
evaluation does."""

import math

import torch
import torch.nn as nn

NB_USERS, NB_ITEMS, MF_DIM, MLP_LAYER_SIZES = 138493, 26744, 64, (256, 256, 128, 64)
USERS, CANDIDATES = 100, 1000


class NeuMF(nn.Module):
    def __init__(self, nb_users, nb_items, mf_dim, mlp_layer_sizes):
        if mlp_layer_sizes[0] % 2 != 0:
            raise RuntimeError("u dummy, mlp_layer_sizes[0] % 2 != 0")
        super().__init__()
        nb_mlp_layers = len(mlp_layer_sizes)

        self.mf_user_embed = nn.Embedding(nb_users, mf_dim)
        self.mf_item_embed = nn.Embedding(nb_items, mf_dim)
        self.mlp_user_embed = nn.Embedding(nb_users, mlp_layer_sizes[0] // 2)
        self.mlp_item_embed = nn.Embedding(nb_items, mlp_layer_sizes[0] // 2)

        self.mlp = nn.ModuleList()
        for i in range(1, nb_mlp_layers):
            self.mlp.extend([nn.Linear(mlp_layer_sizes[i - 1], mlp_layer_sizes[i])])

        self.final = nn.Linear(mlp_layer_sizes[-1] + mf_dim, 1)

        self.mf_user_embed.weight.data.normal_(0.0, 0.01)
        self.mf_item_embed.weight.data.normal_(0.0, 0.01)
        self.mlp_user_embed.weight.data.normal_(0.0, 0.01)
        self.mlp_item_embed.weight.data.normal_(0.0, 0.01)

        def golorot_uniform(layer):
            fan_in, fan_out = layer.in_features, layer.out_features
            limit = math.sqrt(6.0 / (fan_in + fan_out))
            layer.weight.data.uniform_(-limit, limit)

        def lecunn_uniform(layer):
            fan_in, fan_out = layer.in_features, layer.out_features  # noqa: F841
            limit = math.sqrt(3.0 / fan_in)
            layer.weight.data.uniform_(-limit, limit)

        for layer in self.mlp:
            if type(layer) is not nn.Linear:
                continue
            golorot_uniform(layer)
        lecunn_uniform(self.final)

    def forward(self, user, item, sigmoid=False):
        xmfu = self.mf_user_embed(user)
        xmfi = self.mf_item_embed(item)
        xmf = xmfu * xmfi

        xmlpu = self.mlp_user_embed(user)
        xmlpi = self.mlp_item_embed(item)
        xmlp = torch.cat((xmlpu, xmlpi), dim=1)
        for _i, layer in enumerate(self.mlp):
            xmlp = layer(xmlp)
            xmlp = nn.functional.relu(xmlp)

        x = torch.cat((xmf, xmlp), dim=1)
        x = self.final(x)
        if sigmoid:
            x = nn.functional.sigmoid(x)
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = NeuMF(NB_USERS, NB_ITEMS, MF_DIM, MLP_LAYER_SIZES)
        with torch.no_grad():  # trained embeddings are far from their 0.01 initialisation
            for emb in (self.model.mf_user_embed, self.model.mf_item_embed):
                emb.weight.normal_(0.0, 0.5)
            for emb in (self.model.mlp_user_embed, self.model.mlp_item_embed):
                emb.weight.normal_(0.0, 0.5)

    def forward(self, user, item):
        return self.model(user, item, sigmoid=True)


def get_inputs():
    users = torch.randint(0, NB_USERS, (USERS,)).repeat_interleave(CANDIDATES)
    items = torch.randint(0, NB_ITEMS, (USERS * CANDIDATES,))
    return [users, items]


def get_init_inputs():
    return []
