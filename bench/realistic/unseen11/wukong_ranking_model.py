"""Wukong (Meta, 2024) CTR ranking model: embedding lookup + stacked FM/LCB interaction layers + MLP head.

Model / block
    Wukong ("Wukong: Towards a Scaling Law for Large-Scale Recommendation",
    Zhang et al., ICML 2024).  Sparse features are looked up in one shared
    embedding table, dense features are projected to one embedding each; the
    (B, 39, 128) embedding matrix goes through 3 WukongLayers.  Each layer runs
    a Linear Compress Block (mixing along the embedding-count axis,
    permute + matmul) and a Factorization Machine Block (X^T W projection, a
    batched X (X^T W) bmm giving a low-rank pairwise-interaction matrix,
    LayerNorm, MLP with BatchNorm1d) in parallel, concatenates them, adds a
    (projected) residual and applies LayerNorm over the embedding dim.  A
    BatchNorm MLP head gives one logit per example.

Upstream code followed
    github.com/clabrugere/wukong-recommendation, `model/pytorch/wukong.py`
    (LinearCompressBlock, FactorizationMachineBlock, ResidualProjection,
    WukongLayer, Wukong), `model/pytorch/embedding.py` (Embedding) and
    `model/pytorch/mlp.py` (MLP); hyper-parameters from its README ("takes
    hyperparameters from the paper"): num_layers 3, dim_emb 128,
    num_emb_lcb 16, num_emb_fmb 16, rank_fmb 24, 2 hidden layers of 512 in
    the FMB MLP and in the head.

Use case and shapes
    Online ranking of a batch of 8192 candidate (user, ad) pairs with the
    Criteo-style feature set: 26 categorical features (hashed into a shared
    1,000,000-row table) and 13 dense features (log-transformed counts).

    inputs : sparse_inputs int64 (8192, 26) in [0, 1_000_000);
             dense_inputs float32 (8192, 13)
    output : float32 (8192, 1) logits

Cost (rough)
    Parameters 134.6 M (538 MB fp32), of which 128 M is the embedding table.
    FLOPs per example: layer 1 ~4.0 MFLOP (FMB MLP 936->512->2048 dominates),
    layers 2-3 ~3.4 MFLOP each, head 4096->512->1 4.2 MFLOP, dense embedding
    0.04 MFLOP: ~15 MFLOP x 8192 = 124 GFLOP (~3 ms at 40 TFLOP/s).
    Bytes: embedding gather 8192*26*128*4 = 109 MB from a 512 MB table, each
    (8192, 32, 128) activation is 134 MB and the permutes materialise copies:
    ~2 GB moved.

Departures:
    - Table size capped at 1,000,000 rows (Criteo has ~33 M distinct values).
    - BatchNorm1d running statistics are calibrated in __init__ with one
      train-mode pass (momentum=None) over a fixed-seed batch of 4096
      examples; then BN weight/bias are set to 1 + U(-0.2, 0.2) / U(-0.1, 0.1)
      and LayerNorm weight/bias likewise (1 / 0 upstream before training).
    - Dropout p = 0.0 (the upstream default).
    - Other weights keep the upstream init (kaiming_uniform_ for the
      LCB/FMB/residual matrices, PyTorch defaults for Embedding (N(0,1)) and
      Linear).
"""

import torch
from torch import Tensor, nn

NUM_LAYERS = 3
NUM_SPARSE_EMB = 1_000_000
DIM_EMB = 128
NUM_SPARSE_FEATURES = 26
NUM_DENSE_FEATURES = 13
NUM_EMB_LCB = 16
NUM_EMB_FMB = 16
RANK_FMB = 24
NUM_HIDDEN_WUKONG = 2
DIM_HIDDEN_WUKONG = 512
NUM_HIDDEN_HEAD = 2
DIM_HIDDEN_HEAD = 512
DIM_OUTPUT = 1
DROPOUT = 0.0

BATCH = 8192
CALIB_BATCH = 4096


class MLP(nn.Sequential):
    def __init__(self, dim_in, num_hidden, dim_hidden, dim_out=None, batch_norm=True, dropout=0.0):
        layers = []
        for _ in range(num_hidden - 1):
            layers.append(nn.Linear(dim_in, dim_hidden))

            if batch_norm:
                layers.append(nn.BatchNorm1d(dim_hidden))

            layers.append(nn.ReLU())
            layers.append(nn.Dropout(dropout))
            dim_in = dim_hidden

        if dim_out:
            layers.append(nn.Linear(dim_in, dim_out))
        else:
            layers.append(nn.Linear(dim_in, dim_hidden))

        super().__init__(*layers)


class Embedding(nn.Module):
    def __init__(self, num_sparse_emb: int, dim_emb: int, dim_input_dense: int, bias: bool = True) -> None:
        super().__init__()

        self.dim_emb = dim_emb
        self.dim_input_dense = dim_input_dense

        self.sparse_embedding = nn.Embedding(num_sparse_emb, dim_emb)
        self.dense_embedding = nn.Linear(dim_input_dense, dim_input_dense * dim_emb, bias=bias)

    def forward(self, sparse_inputs: Tensor, dense_inputs) -> Tensor:
        sparse_outputs = self.sparse_embedding(sparse_inputs)
        dense_outputs = self.dense_embedding(dense_inputs).view(-1, self.dim_input_dense, self.dim_emb)

        return torch.cat([sparse_outputs, dense_outputs], dim=1)


class LinearCompressBlock(nn.Module):
    def __init__(self, num_emb_in: int, num_emb_out: int) -> None:
        super().__init__()

        self.weight = nn.Parameter(torch.empty((num_emb_in, num_emb_out)))
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.weight)

    def forward(self, inputs: Tensor) -> Tensor:
        # (bs, num_emb_in, dim_emb) -> (bs, dim_emb, num_emb_in)
        outputs = inputs.permute(0, 2, 1)

        # (bs, dim_emb, num_emb_in) @ (num_emb_in, num_emb_out) -> (bs, dim_emb, num_emb_out)
        outputs = outputs @ self.weight

        # (bs, dim_emb, num_emb_out) -> (bs, num_emb_out, dim_emb)
        outputs = outputs.permute(0, 2, 1)

        return outputs


class FactorizationMachineBlock(nn.Module):
    def __init__(self, num_emb_in, num_emb_out, dim_emb, rank, num_hidden, dim_hidden, dropout) -> None:
        super().__init__()

        self.num_emb_in = num_emb_in
        self.num_emb_out = num_emb_out
        self.dim_emb = dim_emb
        self.rank = rank

        self.weight = nn.Parameter(torch.empty((num_emb_in, rank)))
        self.norm = nn.LayerNorm(num_emb_in * rank)
        self.mlp = MLP(
            dim_in=num_emb_in * rank,
            num_hidden=num_hidden,
            dim_hidden=dim_hidden,
            dim_out=num_emb_out * dim_emb,
            dropout=dropout,
        )
        self._reset_parameters()

    def _reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight)

    def forward(self, inputs: Tensor) -> Tensor:
        # (bs, num_emb_in, dim_emb) -> (bs, dim_emb, num_emb_in)
        outputs = inputs.permute(0, 2, 1)

        # (bs, dim_emb, num_emb_in) @ (num_emb_in, rank) -> (bs, dim_emb, rank)
        outputs = outputs @ self.weight

        # (bs, num_emb_in, dim_emb) @ (bs, dim_emb, rank) -> (bs, num_emb_in, rank)
        outputs = torch.bmm(inputs, outputs)

        # (bs, num_emb_in, rank) -> (bs, num_emb_in * rank)
        outputs = outputs.view(-1, self.num_emb_in * self.rank)

        # (bs, num_emb_in * rank) -> (bs, num_emb_out * dim_emb)
        outputs = self.mlp(self.norm(outputs))

        # (bs, num_emb_out * dim_emb) -> (bs, num_emb_out, dim_emb)
        outputs = outputs.view(-1, self.num_emb_out, self.dim_emb)

        return outputs


class ResidualProjection(nn.Module):
    def __init__(self, num_emb_in: int, num_emb_out: int) -> None:
        super().__init__()

        self.weight = nn.Parameter(torch.empty((num_emb_in, num_emb_out)))
        self._reset_parameters()

    def _reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight)

    def forward(self, inputs: Tensor) -> Tensor:
        # (bs, num_emb_in, dim_emb) -> (bs, dim_emb, num_emb_in)
        outputs = inputs.permute(0, 2, 1)

        # (bs, dim_emb, num_emb_in) @ (num_emb_in, num_emb_out) -> (bs, dim_emb, num_emb_out)
        outputs = outputs @ self.weight

        # # (bs, dim_emb, num_emb_out) -> (bs, num_emb_out, dim_emb)
        outputs = outputs.permute(0, 2, 1)

        return outputs


class WukongLayer(nn.Module):
    def __init__(
        self, num_emb_in, dim_emb, num_emb_lcb, num_emb_fmb, rank_fmb, num_hidden, dim_hidden, dropout
    ) -> None:
        super().__init__()

        self.lcb = LinearCompressBlock(num_emb_in, num_emb_lcb)
        self.fmb = FactorizationMachineBlock(
            num_emb_in,
            num_emb_fmb,
            dim_emb,
            rank_fmb,
            num_hidden,
            dim_hidden,
            dropout,
        )
        self.norm = nn.LayerNorm(dim_emb)

        if num_emb_in != num_emb_lcb + num_emb_fmb:
            self.residual_projection = ResidualProjection(num_emb_in, num_emb_lcb + num_emb_fmb)
        else:
            self.residual_projection = nn.Identity()

    def forward(self, inputs: Tensor) -> Tensor:
        # (bs, num_emb_in, dim_emb) -> (bs, num_emb_lcb, dim_emb)
        lcb = self.lcb(inputs)

        # (bs, num_emb_in, dim_emb) -> (bs, num_emb_fmb, dim_emb)
        fmb = self.fmb(inputs)

        # (bs, num_emb_lcb, dim_emb), (bs, num_emb_fmb, dim_emb) -> (bs, num_emb_lcb + num_emb_fmb, dim_emb)
        outputs = torch.concat((fmb, lcb), dim=1)

        # (bs, num_emb_lcb + num_emb_fmb, dim_emb) -> (bs, num_emb_lcb + num_emb_fmb, dim_emb)
        outputs = self.norm(outputs + self.residual_projection(inputs))

        return outputs


class Wukong(nn.Module):
    def __init__(
        self,
        num_layers,
        num_sparse_emb,
        dim_emb,
        dim_input_sparse,
        dim_input_dense,
        num_emb_lcb,
        num_emb_fmb,
        rank_fmb,
        num_hidden_wukong,
        dim_hidden_wukong,
        num_hidden_head,
        dim_hidden_head,
        dim_output,
        dropout=0.0,
    ) -> None:
        super().__init__()

        self.dim_emb = dim_emb
        self.num_emb_lcb = num_emb_lcb
        self.num_emb_fmb = num_emb_fmb

        self.embedding = Embedding(num_sparse_emb, dim_emb, dim_input_dense)

        num_emb_in = dim_input_sparse + dim_input_dense
        self.interaction_layers = nn.Sequential()
        for _ in range(num_layers):
            self.interaction_layers.append(
                WukongLayer(
                    num_emb_in,
                    dim_emb,
                    num_emb_lcb,
                    num_emb_fmb,
                    rank_fmb,
                    num_hidden_wukong,
                    dim_hidden_wukong,
                    dropout,
                ),
            )
            num_emb_in = num_emb_lcb + num_emb_fmb

        self.projection_head = MLP(
            (num_emb_lcb + num_emb_fmb) * dim_emb,
            num_hidden_head,
            dim_hidden_head,
            dim_output,
            dropout,
        )

    def forward(self, sparse_inputs: Tensor, dense_inputs) -> Tensor:
        outputs = self.embedding(sparse_inputs, dense_inputs)
        outputs = self.interaction_layers(outputs)
        outputs = outputs.view(-1, (self.num_emb_lcb + self.num_emb_fmb) * self.dim_emb)
        outputs = self.projection_head(outputs)

        return outputs


def _make_batch(batch, generator=None):
    sparse_inputs = torch.randint(0, NUM_SPARSE_EMB, (batch, NUM_SPARSE_FEATURES), generator=generator)
    # Criteo-style dense features: log(1 + count)
    dense_inputs = torch.log1p(torch.rand(batch, NUM_DENSE_FEATURES, generator=generator) * 1000.0)
    return sparse_inputs, dense_inputs


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Wukong(
            num_layers=NUM_LAYERS,
            num_sparse_emb=NUM_SPARSE_EMB,
            dim_emb=DIM_EMB,
            dim_input_sparse=NUM_SPARSE_FEATURES,
            dim_input_dense=NUM_DENSE_FEATURES,
            num_emb_lcb=NUM_EMB_LCB,
            num_emb_fmb=NUM_EMB_FMB,
            rank_fmb=RANK_FMB,
            num_hidden_wukong=NUM_HIDDEN_WUKONG,
            dim_hidden_wukong=DIM_HIDDEN_WUKONG,
            num_hidden_head=NUM_HIDDEN_HEAD,
            dim_hidden_head=DIM_HIDDEN_HEAD,
            dim_output=DIM_OUTPUT,
            dropout=DROPOUT,
        )
        self._calibrate_bn()
        self.eval()

    @torch.no_grad()
    def _calibrate_bn(self):
        bns = [m for m in self.modules() if isinstance(m, nn.BatchNorm1d)]
        for bn in bns:
            bn.reset_running_stats()
            bn.momentum = None  # cumulative average over the calibration pass
        g = torch.Generator().manual_seed(1234)
        sparse_inputs, dense_inputs = _make_batch(CALIB_BATCH, generator=g)
        self.train()
        self.model(sparse_inputs, dense_inputs)
        for bn in bns:
            bn.momentum = 0.1
        for m in self.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.LayerNorm)):
                m.weight.add_(torch.empty_like(m.weight).uniform_(-0.2, 0.2))
                m.bias.uniform_(-0.1, 0.1)

    def forward(self, sparse_inputs, dense_inputs):
        return self.model(sparse_inputs, dense_inputs)


def get_inputs():
    sparse_inputs, dense_inputs = _make_batch(BATCH)
    return [sparse_inputs, dense_inputs]


def get_init_inputs():
    return []
