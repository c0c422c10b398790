"""DCN (Deep & Cross Network, v1; Wang et al., ADKDD 2017) -- full CTR-prediction forward on Criteo features.

Model / block: recommender CTR model DCN with the original *vector* cross layer:
    x_{l+1} = x_0 * (x_l . w_l) + b_l + x_l          (6 cross layers, as the paper's best Criteo model)
in parallel with a deep ReLU MLP (1024, 1024) over the same input x_0 = [26 sparse embeddings (dim 16) | 13 dense],
a first-order linear part (dim-1 embedding per sparse field + dense weights), dnn_linear over
concat(cross_out, deep_out), PredictionLayer bias and sigmoid -> click probability.
Upstream code followed: DeepCTR-Torch (shenweichen/DeepCTR-Torch) deepctr_torch/models/dcn.py (DCN),
layers/interaction.py (CrossNet, parameterization='vector'), layers/core.py (DNN, PredictionLayer),
models/basemodel.py (Linear, input_from_feature_columns), inputs.py (combined_dnn_input).
Use case: online CTR ranking of a batch of 8192 candidate impressions (Criteo display-ads schema).
Shapes: dense [batch=8192, 13] fp32 (min-max scaled), sparse_ids [8192, 26] int64 -> click prob [8192, 1] fp32.
Embedding tables: Criteo-Kaggle field cardinalities, hashed to at most 1M rows -> 5.58M rows x 16 (357 MB) plus
5.58M x 1 linear-part tables (22 MB).
Rough FLOPs: deep 2*8192*(429*1024 + 1024*1024) = 24.4 GFLOP, cross 6*4*8192*429 = 0.08 GFLOP -> ~25 GFLOP
(~0.5 ms of GEMM) plus 52 embedding gathers and ~100 small elementwise/concat ops (launch-bound in eager).

Departures:
- Sparse ids and dense values come as two tensors (DeepCTR packs everything into one float X and casts slices
  with .long()); the per-field slicing / per-field embedding lookup / concat structure is kept.
- Vocabularies hashed to <= 1,000,000 rows per field (the largest Criteo fields have 5-10M ids).
- Init: embeddings normal(0, 0.25) (DeepCTR init_std=1e-4 gives near-constant outputs), DNN weights
  He-normal, dnn_linear normal(0, 0.15), linear-part embeddings normal(0, 0.01), dense weights normal(0, 0.1),
  cross kernels xavier_normal (as upstream), cross biases 0.01 * normal (upstream zeros), chosen so the logits have
  std ~1. Ids drawn from a skewed (power-law-like) distribution.
- No dropout, no L2 regularisation terms (training only).
"""

import math

import torch
import torch.nn as nn

BATCH = 8192
NUM_DENSE = 13
EMBED_DIM = 16
CRITEO_CARDINALITIES = [
    1460,
    583,
    10131227,
    2202608,
    305,
    24,
    12517,
    633,
    3,
    93145,
    5683,
    8351593,
    3194,
    27,
    14992,
    5461306,
    10,
    5652,
    2173,
    4,
    7046547,
    18,
    15,
    286181,
    105,
    142572,
]
HASH_CAP = 1_000_000
VOCABS = [min(c, HASH_CAP) for c in CRITEO_CARDINALITIES]
NUM_SPARSE = len(VOCABS)
DNN_HIDDEN = (1024, 1024)
CROSS_NUM = 6


class CrossNet(nn.Module):
    """The Cross Network part of Deep&Cross Network model (vector parameterization)."""

    def __init__(self, in_features, layer_num=2, parameterization="vector"):
        super().__init__()
        self.layer_num = layer_num
        self.parameterization = parameterization
        self.kernels = nn.Parameter(torch.empty(self.layer_num, in_features, 1))
        self.bias = nn.Parameter(torch.empty(self.layer_num, in_features, 1))
        for i in range(self.kernels.shape[0]):
            nn.init.xavier_normal_(self.kernels[i])
        for i in range(self.bias.shape[0]):
            nn.init.normal_(self.bias[i], 0.0, 0.01)

    def forward(self, inputs):
        x_0 = inputs.unsqueeze(2)
        x_l = x_0
        for i in range(self.layer_num):
            xl_w = torch.tensordot(x_l, self.kernels[i], dims=([1], [0]))
            dot_ = torch.matmul(x_0, xl_w)
            x_l = dot_ + self.bias[i] + x_l
        x_l = torch.squeeze(x_l, dim=2)
        return x_l


class DNN(nn.Module):
    def __init__(self, inputs_dim, hidden_units):
        super().__init__()
        hidden_units = [inputs_dim] + list(hidden_units)
        self.linears = nn.ModuleList(
            [nn.Linear(hidden_units[i], hidden_units[i + 1]) for i in range(len(hidden_units) - 1)]
        )
        self.activation_layers = nn.ModuleList([nn.ReLU() for _ in range(len(hidden_units) - 1)])
        for lin in self.linears:
            nn.init.normal_(lin.weight, mean=0, std=math.sqrt(2.0 / lin.in_features))
            nn.init.zeros_(lin.bias)

    def forward(self, inputs):
        deep_input = inputs
        for i in range(len(self.linears)):
            fc = self.linears[i](deep_input)
            fc = self.activation_layers[i](fc)
            deep_input = fc
        return deep_input


class Linear(nn.Module):
    """DeepCTR-Torch first-order (wide) part."""

    def __init__(self, vocabs, num_dense):
        super().__init__()
        self.embedding_dict = nn.ModuleList([nn.Embedding(v, 1) for v in vocabs])
        for emb in self.embedding_dict:
            nn.init.normal_(emb.weight, mean=0, std=0.01)
        self.weight = nn.Parameter(torch.empty(num_dense, 1))
        nn.init.normal_(self.weight, mean=0, std=0.1)

    def forward(self, sparse_ids, dense_value_list):
        sparse_embedding_list = [emb(sparse_ids[:, i : i + 1]) for i, emb in enumerate(self.embedding_dict)]
        linear_logit = torch.zeros([sparse_ids.shape[0], 1], device=sparse_ids.device)
        sparse_embedding_cat = torch.cat(sparse_embedding_list, dim=-1)
        sparse_feat_logit = torch.sum(sparse_embedding_cat, dim=-1, keepdim=False)
        linear_logit += sparse_feat_logit
        dense_value_logit = torch.cat(dense_value_list, dim=-1).matmul(self.weight)
        linear_logit += dense_value_logit
        return linear_logit


class PredictionLayer(nn.Module):
    def __init__(self, use_bias=True):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros((1,)))

    def forward(self, X):
        output = X + self.bias
        return torch.sigmoid(output)


def combined_dnn_input(sparse_embedding_list, dense_value_list):
    sparse_dnn_input = torch.flatten(torch.cat(sparse_embedding_list, dim=-1), start_dim=1)
    dense_dnn_input = torch.flatten(torch.cat(dense_value_list, dim=-1), start_dim=1)
    return torch.cat([sparse_dnn_input, dense_dnn_input], dim=-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding_dict = nn.ModuleList([nn.Embedding(v, EMBED_DIM) for v in VOCABS])
        for emb in self.embedding_dict:
            nn.init.normal_(emb.weight, mean=0, std=0.25)
        self.linear_model = Linear(VOCABS, NUM_DENSE)
        input_dim = NUM_SPARSE * EMBED_DIM + NUM_DENSE  # 429
        self.dnn = DNN(input_dim, DNN_HIDDEN)
        self.dnn_linear = nn.Linear(input_dim + DNN_HIDDEN[-1], 1, bias=False)
        nn.init.normal_(self.dnn_linear.weight, mean=0, std=0.15)
        self.crossnet = CrossNet(in_features=input_dim, layer_num=CROSS_NUM, parameterization="vector")
        self.out = PredictionLayer()
        self.eval()

    def forward(self, dense, sparse_ids):
        dense_value_list = [dense[:, i : i + 1] for i in range(dense.shape[1])]
        logit = self.linear_model(sparse_ids, dense_value_list)

        sparse_embedding_list = [emb(sparse_ids[:, i : i + 1]) for i, emb in enumerate(self.embedding_dict)]
        dnn_input = combined_dnn_input(sparse_embedding_list, dense_value_list)

        deep_out = self.dnn(dnn_input)
        cross_out = self.crossnet(dnn_input)
        stack_out = torch.cat((cross_out, deep_out), dim=-1)
        logit += self.dnn_linear(stack_out)
        y_pred = self.out(logit)
        return y_pred


def get_inputs():
    dense = torch.rand(BATCH, NUM_DENSE, dtype=torch.float32)
    # skewed id popularity: small ids are hot
    cols = [(torch.rand(BATCH) ** 4 * v).long().clamp_(max=v - 1) for v in VOCABS]
    sparse_ids = torch.stack(cols, dim=1)
    return [dense, sparse_ids]


def get_init_inputs():
    return []
