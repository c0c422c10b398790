"""Attentional Factorization Machine (AFM, Xiao et al. 2017) CTR recommender model on Criteo, the whole
model forward, as pytorch-fm (rixwew/pytorch-fm) writes it in torchfm/model/afm.py and torchfm/layer.py
(AttentionalFactorizationMachineModel with FeaturesEmbedding, FeaturesLinear and
AttentionalFactorizationMachine; embed_dim 16, attn_size 16 as in pytorch-fm's main.py). 39 sparse
fields (13 bucketized integer + 26 categorical Criteo features, ~1.1M feature ids after the
min-count threshold) share one embedding table addressed with per-field offsets (the offsets are an
array turned into a tensor on every call); the attention part builds all 741 field pairs with Python
index lists (x[:, row], x[:, col]), takes their element-wise products, scores each pair with an
attention MLP (Linear 16->16, ReLU, Linear 16->1), softmaxes over the pairs, pools the products with
those attention weights and projects to a logit; the first-order FeaturesLinear term is added and a
sigmoid gives the click probability. Dropout is inactive in eval.
Use case: CTR scoring of a batch of 16384 ad impressions."""

import torch
import torch.nn as nn
import torch.nn.functional as F

# 13 bucketized integer fields + 26 categorical fields (Criteo, ids with count >= 10)
FIELD_DIMS = [49, 101, 126, 45, 223, 118, 84, 76, 95, 9, 30, 40, 75]
FIELD_DIMS += [1458, 555, 193949, 138801, 306, 19, 11970, 634, 4, 42646, 5178, 192773, 3175]
FIELD_DIMS += [27, 11422, 181075, 11, 4654, 2032, 5, 189657, 18, 16, 59697, 86, 45571]
EMBED_DIM = 16
ATTN_SIZE = 16
DROPOUTS = (0.2, 0.2)
BATCH = 16384


def _offsets(field_dims):
    offsets, total = [], 0
    for d in field_dims[:-1]:
        total += d
        offsets.append(total)
    return [0] + offsets  # np.array((0, *np.cumsum(field_dims)[:-1]), dtype=np.long) in pytorch-fm


class FeaturesLinear(nn.Module):
    def __init__(self, field_dims, output_dim=1):
        super().__init__()
        self.fc = nn.Embedding(sum(field_dims), output_dim)
        self.bias = nn.Parameter(torch.zeros((output_dim,)))
        self.offsets = _offsets(field_dims)

    def forward(self, x):
        """
        :param x: Long tensor of size ``(batch_size, num_fields)``
        """
        x = x + x.new_tensor(self.offsets).unsqueeze(0)
        return torch.sum(self.fc(x), dim=1) + self.bias


class FeaturesEmbedding(nn.Module):
    def __init__(self, field_dims, embed_dim):
        super().__init__()
        self.embedding = nn.Embedding(sum(field_dims), embed_dim)
        self.offsets = _offsets(field_dims)
        nn.init.xavier_uniform_(self.embedding.weight.data)

    def forward(self, x):
        """
        :param x: Long tensor of size ``(batch_size, num_fields)``
        """
        x = x + x.new_tensor(self.offsets).unsqueeze(0)
        return self.embedding(x)


class AttentionalFactorizationMachine(nn.Module):
    def __init__(self, embed_dim, attn_size, dropouts):
        super().__init__()
        self.attention = nn.Linear(embed_dim, attn_size)
        self.projection = nn.Linear(attn_size, 1)
        self.fc = nn.Linear(embed_dim, 1)
        self.dropouts = dropouts

    def forward(self, x):
        """
        :param x: Float tensor of size ``(batch_size, num_fields, embed_dim)``
        """
        num_fields = x.shape[1]
        row, col = list(), list()
        for i in range(num_fields - 1):
            for j in range(i + 1, num_fields):
                row.append(i), col.append(j)
        p, q = x[:, row], x[:, col]
        inner_product = p * q
        attn_scores = F.relu(self.attention(inner_product))
        attn_scores = F.softmax(self.projection(attn_scores), dim=1)
        attn_scores = F.dropout(attn_scores, p=self.dropouts[0], training=self.training)
        attn_output = torch.sum(attn_scores * inner_product, dim=1)
        attn_output = F.dropout(attn_output, p=self.dropouts[1], training=self.training)
        return self.fc(attn_output)


class AttentionalFactorizationMachineModel(nn.Module):
    """
    A pytorch implementation of Attentional Factorization Machine.

    Reference:
        J Xiao, et al. Attentional Factorization Machines: Learning the Weight of Feature Interactions via Attention Networks, 2017.
    """

    def __init__(self, field_dims, embed_dim, attn_size, dropouts):
        super().__init__()
        self.num_fields = len(field_dims)
        self.embedding = FeaturesEmbedding(field_dims, embed_dim)
        self.linear = FeaturesLinear(field_dims)
        self.afm = AttentionalFactorizationMachine(embed_dim, attn_size, dropouts)

    def forward(self, x):
        """
        :param x: Long tensor of size ``(batch_size, num_fields)``
        """
        x = self.linear(x) + self.afm(self.embedding(x))
        return torch.sigmoid(x.squeeze(1))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = AttentionalFactorizationMachineModel(
            FIELD_DIMS, embed_dim=EMBED_DIM, attn_size=ATTN_SIZE, dropouts=DROPOUTS
        )
        with torch.no_grad():  # trained-looking embeddings (xavier on a 1.1M-row table is ~0.002) and weights
            self.model.embedding.embedding.weight.normal_(0.0, 0.3)
            self.model.linear.fc.weight.normal_(0.0, 0.1)
            self.model.linear.bias.fill_(-1.5)
            self.model.afm.fc.weight.mul_(20.0)
        self.eval()

    def forward(self, x):
        return self.model(x)


def get_inputs():
    x = torch.stack([torch.randint(0, d, (BATCH,)) for d in FIELD_DIMS], dim=1)
    return [x]


def get_init_inputs():
    return []
