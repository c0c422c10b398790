"""PLE (Progressive Layered Extraction, Tang et al. RecSys 2020) multi-task recommender model, the whole
model forward, as the Multitask-Recommendation-Library (MTReclib, easezyc/Multitask-Recommendation-Library)
writes it in models/ple.py and models/layers.py, with that library's AliExpress setup: 16
categorical fields (one shared embedding table with per-field offsets, embed_dim 128) plus 63
numerical features projected by one Linear to a 17th 128-d "field"; 2 tasks (CTR and CTCVR); two
extraction layers (CGC) with bottom_mlp_dims (512, 256), 4 shared experts and 4 task-specific
experts per task per layer (expert_num 8). Each expert is MultiLayerPerceptron = Linear ->
BatchNorm1d -> ReLU -> Dropout; each task gate is Linear + Softmax over its (specific + shared)
experts, and the shared gate of the first layer mixes all 12 experts; gating is done with
torch.bmm of the gate weights with the concatenated expert outputs. Towers: MLP (128, 64) with
BatchNorm1d + Linear->1, sigmoid. BatchNorm in eval mode with non-trivial running statistics;
dropout inactive. Experts run in Python loops, one small GEMM each.
Use case: e-commerce ranking, batch 4096 user-item samples, returns (p_ctr, p_ctcvr)."""

import torch
import torch.nn as nn

CATEGORICAL_FIELD_DIMS = [100000, 50000, 20000, 10000, 5000, 2000, 1000, 500, 200, 100, 50, 20, 10, 8, 4, 2]
NUMERICAL_NUM = 63
EMBED_DIM = 128
BOTTOM_MLP_DIMS = (512, 256)
TOWER_MLP_DIMS = (128, 64)
TASK_NUM = 2
EXPERT_NUM = 8
SHARED_EXPERT_NUM = EXPERT_NUM // 2
SPECIFIC_EXPERT_NUM = EXPERT_NUM // 2
DROPOUT = 0.2
BATCH = 4096


class EmbeddingLayer(nn.Module):
    def __init__(self, field_dims, embed_dim):
        super().__init__()
        self.embedding = nn.Embedding(sum(field_dims), embed_dim)
        offsets, total = [0], 0
        for d in field_dims[:-1]:
            total += d
            offsets.append(total)
        self.offsets = offsets  # np.array((0, *np.cumsum(field_dims)[:-1]), dtype=np.long) in MTReclib
        nn.init.xavier_uniform_(self.embedding.weight.data)

    def forward(self, x):
        x = x + x.new_tensor(self.offsets).unsqueeze(0)
        return self.embedding(x)


class MultiLayerPerceptron(nn.Module):
    def __init__(self, input_dim, embed_dims, dropout, output_layer=True):
        super().__init__()
        layers = list()
        for embed_dim in embed_dims:
            layers.append(nn.Linear(input_dim, embed_dim))
            layers.append(nn.BatchNorm1d(embed_dim))
            layers.append(nn.ReLU())
            layers.append(nn.Dropout(p=dropout))
            input_dim = embed_dim
        if output_layer:
            layers.append(nn.Linear(input_dim, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, x):
        """
        :param x: Float tensor of size ``(batch_size, embed_dim)``
        """
        return self.mlp(x)


class PLEModel(nn.Module):
    """
    A pytorch implementation of PLE Model.

    Reference:
        Tang, Hongyan, et al. Progressive layered extraction (ple): A novel multi-task learning (mtl) model for personalized recommendations. RecSys 2020.
    """

    def __init__(
        self,
        categorical_field_dims,
        numerical_num,
        embed_dim,
        bottom_mlp_dims,
        tower_mlp_dims,
        task_num,
        shared_expert_num,
        specific_expert_num,
        dropout,
    ):
        super().__init__()
        self.embedding = EmbeddingLayer(categorical_field_dims, embed_dim)
        self.numerical_layer = nn.Linear(numerical_num, embed_dim)
        self.embed_output_dim = (len(categorical_field_dims) + 1) * embed_dim
        self.task_num = task_num
        self.shared_expert_num = shared_expert_num
        self.specific_expert_num = specific_expert_num
        self.layers_num = len(bottom_mlp_dims)

        self.task_experts = [[0] * self.task_num for _ in range(self.layers_num)]
        self.task_gates = [[0] * self.task_num for _ in range(self.layers_num)]
        self.share_experts = [0] * self.layers_num
        self.share_gates = [0] * self.layers_num
        for i in range(self.layers_num):
            input_dim = self.embed_output_dim if 0 == i else bottom_mlp_dims[i - 1]
            self.share_experts[i] = nn.ModuleList(
                [
                    MultiLayerPerceptron(input_dim, [bottom_mlp_dims[i]], dropout, output_layer=False)
                    for k in range(self.shared_expert_num)
                ]
            )
            self.share_gates[i] = nn.Sequential(
                nn.Linear(input_dim, shared_expert_num + task_num * specific_expert_num), nn.Softmax(dim=1)
            )
            for j in range(task_num):
                self.task_experts[i][j] = nn.ModuleList(
                    [
                        MultiLayerPerceptron(input_dim, [bottom_mlp_dims[i]], dropout, output_layer=False)
                        for k in range(self.specific_expert_num)
                    ]
                )
                self.task_gates[i][j] = nn.Sequential(
                    nn.Linear(input_dim, shared_expert_num + specific_expert_num), nn.Softmax(dim=1)
                )
            self.task_experts[i] = nn.ModuleList(self.task_experts[i])
            self.task_gates[i] = nn.ModuleList(self.task_gates[i])

        self.task_experts = nn.ModuleList(self.task_experts)
        self.task_gates = nn.ModuleList(self.task_gates)
        self.share_experts = nn.ModuleList(self.share_experts)
        self.share_gates = nn.ModuleList(self.share_gates)

        self.tower = nn.ModuleList(
            [MultiLayerPerceptron(bottom_mlp_dims[-1], tower_mlp_dims, dropout) for i in range(task_num)]
        )

    def forward(self, categorical_x, numerical_x):
        """
        :param
        categorical_x: Long tensor of size ``(batch_size, categorical_field_num)``
        numerical_x: Long tensor of size ``(batch_size, numerical_num)``
        """
        categorical_emb = self.embedding(categorical_x)
        numerical_emb = self.numerical_layer(numerical_x).unsqueeze(1)
        emb = torch.cat([categorical_emb, numerical_emb], 1).view(-1, self.embed_output_dim)

        task_fea = [emb for i in range(self.task_num + 1)]
        for i in range(self.layers_num):
            share_output = [expert(task_fea[-1]).unsqueeze(1) for expert in self.share_experts[i]]
            task_output_list = []
            for j in range(self.task_num):
                task_output = [expert(task_fea[j]).unsqueeze(1) for expert in self.task_experts[i][j]]
                task_output_list.extend(task_output)
                mix_ouput = torch.cat(task_output + share_output, dim=1)
                gate_value = self.task_gates[i][j](task_fea[j]).unsqueeze(1)
                task_fea[j] = torch.bmm(gate_value, mix_ouput).squeeze(1)
            if i != self.layers_num - 1:  # the last layer does not need the shared gate output
                gate_value = self.share_gates[i](task_fea[-1]).unsqueeze(1)
                mix_ouput = torch.cat(task_output_list + share_output, dim=1)
                task_fea[-1] = torch.bmm(gate_value, mix_ouput).squeeze(1)

        results = [torch.sigmoid(self.tower[i](task_fea[i]).squeeze(1)) for i in range(self.task_num)]
        return results


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = PLEModel(
            CATEGORICAL_FIELD_DIMS,
            NUMERICAL_NUM,
            embed_dim=EMBED_DIM,
            bottom_mlp_dims=BOTTOM_MLP_DIMS,
            tower_mlp_dims=TOWER_MLP_DIMS,
            task_num=TASK_NUM,
            shared_expert_num=SHARED_EXPERT_NUM,
            specific_expert_num=SPECIFIC_EXPERT_NUM,
            dropout=DROPOUT,
        )
        with torch.no_grad():
            # trained-looking embeddings (xavier on a 190k-row table gives ~0.005)
            self.model.embedding.embedding.weight.normal_(0.0, 0.5)
            for m in self.modules():
                if isinstance(m, nn.BatchNorm1d):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)
                    m.reset_running_stats()
                    m.momentum = 1.0  # running stats := the calibration batch statistics
            # trained BatchNorm running statistics: estimated on one calibration batch (train-mode BatchNorm,
            # dropout off), so that the eval-mode BatchNorms see data on the scale of their statistics
            self.train()
            for m in self.modules():
                if isinstance(m, nn.Dropout):
                    m.eval()
            self.model(*get_inputs())
            for m in self.modules():
                if isinstance(m, nn.BatchNorm1d):
                    m.momentum = 0.1
        self.eval()

    def forward(self, categorical_x, numerical_x):
        return tuple(self.model(categorical_x, numerical_x))


def get_inputs():
    categorical_x = torch.stack([torch.randint(0, d, (BATCH,)) for d in CATEGORICAL_FIELD_DIMS], dim=1)
    numerical_x = torch.rand(BATCH, NUMERICAL_NUM)  # min-max normalised numerical features
    return [categorical_x, numerical_x]


def get_init_inputs():
    return []
