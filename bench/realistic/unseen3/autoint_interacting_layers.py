"""AutoInt's click-through model (a recommender; DeepCTR-torch's AutoInt without the optional
DNN, the AutoInt of the paper): the 26 sparse Criteo fields looked up in 26 per-field embedding
tables of 10000 hashed values and 16 dims (DeepCTR's embedding_dict, one lookup per field, then
concatenated to (batch, 26, 16)), three InteractingLayers (multi-head self-attention across the
fields: tensordot with W_Query/W_key/W_Value 16 x 16, split into 2 heads of 8 and stacked,
einsum scores over 26 x 26, softmax, values, heads concatenated back, the W_Res residual and
ReLU), flattened to 416 and mapped by Linear(416, 1, no bias), then a sigmoid; batch 8192."""

import torch
import torch.nn as nn
import torch.nn.functional as F

FIELDS, VOCAB, DIM, HEADS, LAYERS, BATCH = 26, 10000, 16, 2, 3, 8192


class InteractingLayer(nn.Module):
    def __init__(self, embedding_size, head_num=2, use_res=True, scaling=False):
        super().__init__()
        self.att_embedding_size = embedding_size // head_num
        self.head_num = head_num
        self.use_res = use_res
        self.scaling = scaling
        self.W_Query = nn.Parameter(torch.empty(embedding_size, embedding_size))
        self.W_key = nn.Parameter(torch.empty(embedding_size, embedding_size))
        self.W_Value = nn.Parameter(torch.empty(embedding_size, embedding_size))
        if self.use_res:
            self.W_Res = nn.Parameter(torch.empty(embedding_size, embedding_size))
        for tensor in self.parameters():
            nn.init.normal_(
                tensor, mean=0.0, std=embedding_size**-0.5
            )  # trained scale (DeepCTR inits at 0.05)

    def forward(self, inputs):
        # None F D
        querys = torch.tensordot(inputs, self.W_Query, dims=([-1], [0]))
        keys = torch.tensordot(inputs, self.W_key, dims=([-1], [0]))
        values = torch.tensordot(inputs, self.W_Value, dims=([-1], [0]))

        # head_num None F D/head_num
        querys = torch.stack(torch.split(querys, self.att_embedding_size, dim=2))
        keys = torch.stack(torch.split(keys, self.att_embedding_size, dim=2))
        values = torch.stack(torch.split(values, self.att_embedding_size, dim=2))

        inner_product = torch.einsum("bnik,bnjk->bnij", querys, keys)  # head_num None F F
        if self.scaling:
            inner_product /= self.att_embedding_size**0.5
        normalized_att_scores = F.softmax(inner_product, dim=-1)  # head_num None F F

        result = torch.matmul(normalized_att_scores, values)  # head_num None F D/head_num
        result = torch.cat(torch.split(result, 1), dim=-1)
        result = torch.squeeze(result, dim=0)  # None F D
        if self.use_res:
            result += torch.tensordot(inputs, self.W_Res, dims=([-1], [0]))
        result = F.relu(result)
        return result


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding_dict = nn.ModuleDict({f"C{i + 1}": nn.Embedding(VOCAB, DIM) for i in range(FIELDS)})
        for tensor in self.embedding_dict.values():
            nn.init.normal_(tensor.weight, mean=0, std=1.0)
        self.int_layers = nn.ModuleList([InteractingLayer(DIM, HEADS, True) for _ in range(LAYERS)])
        self.dnn_linear = nn.Linear(FIELDS * DIM, 1, bias=False)

    def forward(self, X):
        sparse_embedding_list = [
            self.embedding_dict[f"C{i + 1}"](X[:, i : i + 1].long()) for i in range(FIELDS)
        ]  # each (batch, 1, DIM)
        att_input = torch.cat(sparse_embedding_list, dim=1)
        for layer in self.int_layers:
            att_input = layer(att_input)
        att_output = torch.flatten(att_input, start_dim=1)
        logit = self.dnn_linear(att_output)
        return torch.sigmoid(logit)


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, FIELDS))]


def get_init_inputs():
    return []
