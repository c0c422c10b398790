"""MMoE, the multi-gate mixture-of-experts multi-task recommender (Ma et al., KDD 2018), as
DeepCTR-Torch writes it (MMOE): 26 sparse fields looked up one by one in their own embedding
tables of width 16 (the ids read from the float input matrix X with .long(), DeepCTR's
convention) and 13 dense features, concatenated and flattened to 429; 8 expert DNNs 429 -> 512
-> 256 (ReLU) stacked to [batch, 8, 256]; per task a gate DNN 429 -> 64 (ReLU) and a Linear 64
-> 8 without bias, softmax over the experts, the experts mixed by a batched matmul; per task a
tower DNN 256 -> 128 (ReLU), a Linear 128 -> 1 without bias, PredictionLayer (bias, sigmoid);
two tasks (CTR and CTCVR) concatenated. Batch 4096."""

import torch
import torch.nn as nn

SPARSE_VOCABS = (
    1445, 553, 175781, 128509, 305, 19, 11930, 629, 3, 39529, 5130, 156655, 3175,
    26, 11042, 165512, 10, 4632, 2004, 4, 169808, 17, 15, 51217, 69, 35958,
)  # fmt: skip
NUM_DENSE, EMBEDDING_DIM = 13, 16
NUM_EXPERTS, EXPERT_UNITS, GATE_UNITS, TOWER_UNITS = 8, (512, 256), (64,), (128,)
TASK_TYPES = ("binary", "binary")
BATCH = 4096


class DNN(nn.Module):
    def __init__(self, inputs_dim, hidden_units, dropout_rate=0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout_rate)
        hidden_units = [inputs_dim] + list(hidden_units)
        self.linears = nn.ModuleList(
            [nn.Linear(hidden_units[i], hidden_units[i + 1]) for i in range(len(hidden_units) - 1)]
        )
        self.activation_layers = nn.ModuleList([nn.ReLU(inplace=True) for _ in range(len(hidden_units) - 1)])

    def forward(self, inputs):
        deep_input = inputs
        for i in range(len(self.linears)):
            fc = self.linears[i](deep_input)
            fc = self.activation_layers[i](fc)
            fc = self.dropout(fc)
            deep_input = fc
        return deep_input


class PredictionLayer(nn.Module):
    def __init__(self, task="binary", use_bias=True):
        super().__init__()
        self.use_bias = use_bias
        self.task = task
        if self.use_bias:
            self.bias = nn.Parameter(torch.zeros((1,)))

    def forward(self, X):
        output = X
        if self.use_bias:
            output += self.bias
        if self.task == "binary":
            output = torch.sigmoid(output)
        return output


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_tasks = len(TASK_TYPES)
        self.num_experts = NUM_EXPERTS
        self.gate_dnn_hidden_units = GATE_UNITS
        self.tower_dnn_hidden_units = TOWER_UNITS
        self.embedding_dict = nn.ModuleDict(
            {f"C{i + 1}": nn.Embedding(v, EMBEDDING_DIM) for i, v in enumerate(SPARSE_VOCABS)}
        )
        # X's columns: the sparse ids first, then the dense values
        self.feature_index = {f"C{i + 1}": (i, i + 1) for i in range(len(SPARSE_VOCABS))}
        self.dense_index = [(len(SPARSE_VOCABS) + i, len(SPARSE_VOCABS) + i + 1) for i in range(NUM_DENSE)]
        self.input_dim = len(SPARSE_VOCABS) * EMBEDDING_DIM + NUM_DENSE

        self.expert_dnn = nn.ModuleList([DNN(self.input_dim, EXPERT_UNITS) for _ in range(self.num_experts)])
        self.gate_dnn = nn.ModuleList([DNN(self.input_dim, GATE_UNITS) for _ in range(self.num_tasks)])
        self.gate_dnn_final_layer = nn.ModuleList(
            [nn.Linear(GATE_UNITS[-1], self.num_experts, bias=False) for _ in range(self.num_tasks)]
        )
        self.tower_dnn = nn.ModuleList([DNN(EXPERT_UNITS[-1], TOWER_UNITS) for _ in range(self.num_tasks)])
        self.tower_dnn_final_layer = nn.ModuleList(
            [nn.Linear(TOWER_UNITS[-1], 1, bias=False) for _ in range(self.num_tasks)]
        )
        self.out = nn.ModuleList([PredictionLayer(task) for task in TASK_TYPES])

    def input_from_feature_columns(self, X):
        sparse_embedding_list = [
            self.embedding_dict[name](X[:, start:end].long())
            for name, (start, end) in self.feature_index.items()
        ]
        dense_value_list = [X[:, start:end] for start, end in self.dense_index]
        return sparse_embedding_list, dense_value_list

    @staticmethod
    def combined_dnn_input(sparse_embedding_list, dense_value_list):
        sparse_dnn_input = torch.flatten(torch.cat(sparse_embedding_list, dim=-1), start_dim=1)
        dense_dnn_input = torch.flatten(torch.cat(dense_value_list, dim=-1), start_dim=1)
        return torch.cat([sparse_dnn_input, dense_dnn_input], dim=-1)

    def forward(self, X):
        sparse_embedding_list, dense_value_list = self.input_from_feature_columns(X)
        dnn_input = self.combined_dnn_input(sparse_embedding_list, dense_value_list)

        # expert dnn
        expert_outs = []
        for i in range(self.num_experts):
            expert_out = self.expert_dnn[i](dnn_input)
            expert_outs.append(expert_out)
        expert_outs = torch.stack(expert_outs, 1)  # (bs, num_experts, dim)

        # gate dnn
        mmoe_outs = []
        for i in range(self.num_tasks):
            if len(self.gate_dnn_hidden_units) > 0:
                gate_dnn_out = self.gate_dnn[i](dnn_input)
                gate_dnn_out = self.gate_dnn_final_layer[i](gate_dnn_out)
            else:
                gate_dnn_out = self.gate_dnn_final_layer[i](dnn_input)
            gate_mul_expert = torch.matmul(gate_dnn_out.softmax(1).unsqueeze(1), expert_outs)  # (bs, 1, dim)
            mmoe_outs.append(gate_mul_expert.squeeze())

        # tower dnn (task-specific)
        task_outs = []
        for i in range(self.num_tasks):
            if len(self.tower_dnn_hidden_units) > 0:
                tower_dnn_out = self.tower_dnn[i](mmoe_outs[i])
                tower_dnn_logit = self.tower_dnn_final_layer[i](tower_dnn_out)
            else:
                tower_dnn_logit = self.tower_dnn_final_layer[i](mmoe_outs[i])
            output = self.out[i](tower_dnn_logit)
            task_outs.append(output)
        task_outs = torch.cat(task_outs, -1)
        return task_outs


def get_inputs():
    ids = torch.stack([torch.randint(0, v, (BATCH,)) for v in SPARSE_VOCABS], dim=1).float()
    dense = torch.rand(BATCH, NUM_DENSE)  # DeepCTR's examples scale dense features to [0, 1]
    return [torch.cat([ids, dense], dim=1)]


def get_init_inputs():
    return []
