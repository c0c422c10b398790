"""FiBiNET for click-through prediction (a recommender) as FuxiCTR writes it: the 39 Criteo
fields (13 discretised numeric + 26 categorical, about 1.1M ids after min-count filtering), each
looked up in its own embedding table of width 10 and stacked; SENET (SqueezeExcitation: mean
over the embedding, Linear 39 -> 13, ReLU, Linear 13 -> 39, ReLU, the fields reweighted); two
BilinearInteractionV2 layers of type field_interaction (the 741 field pairs picked by
index_select on the upper-triangle indices, a separate 10 x 10 matrix per pair applied by a
broadcast matmul, times the right field), on the raw and on the SENET embeddings; concatenated
and flattened to 14820, the DNN (MLP_Block 14820 -> 400 -> 400 -> 400 -> 1, ReLU), plus the
logistic-regression term (per-field weights of width 1, summed), sigmoid. Batch 2048 (the
upper-triangle indices are a buffer here, a frozen nn.Parameter in FuxiCTR)."""

import torch
import torch.nn as nn

VOCABS = (
    # 13 numeric fields, discretised
    48, 102, 117, 43, 221, 112, 80, 54, 93, 11, 31, 42, 76,
    # 26 categorical fields, after min-count-10 filtering
    1445, 553, 175781, 128509, 305, 19, 11930, 629, 3, 39529, 5130, 156655, 3175,
    26, 11042, 165512, 10, 4632, 2004, 4, 169808, 17, 15, 51217, 69, 35958,
)  # fmt: skip
EMBEDDING_DIM, REDUCTION_RATIO, HIDDEN_UNITS = 10, 3, (400, 400, 400)
BATCH = 2048


class FeatureEmbedding(nn.Module):
    def __init__(self, vocabs, embedding_dim):
        super().__init__()
        self.embedding_layers = nn.ModuleList([nn.Embedding(v, embedding_dim) for v in vocabs])

    def forward(self, X):
        feature_emb_list = [layer(X[:, i]) for i, layer in enumerate(self.embedding_layers)]
        return torch.stack(feature_emb_list, dim=1)


class SqueezeExcitation(nn.Module):
    def __init__(self, num_fields, reduction_ratio=3, excitation_activation="ReLU"):
        super().__init__()
        reduced_size = max(1, int(num_fields / reduction_ratio))
        excitation = [
            nn.Linear(num_fields, reduced_size, bias=False),
            nn.ReLU(),
            nn.Linear(reduced_size, num_fields, bias=False),
        ]
        if excitation_activation.lower() == "relu":
            excitation.append(nn.ReLU())
        elif excitation_activation.lower() == "sigmoid":
            excitation.append(nn.Sigmoid())
        self.excitation = nn.Sequential(*excitation)

    def forward(self, feature_emb):
        Z = torch.mean(feature_emb, dim=-1, out=None)
        A = self.excitation(Z)
        V = feature_emb * A.unsqueeze(-1)
        return V


class BilinearInteractionV2(nn.Module):
    def __init__(self, num_fields, embedding_dim, bilinear_type="field_interaction"):
        super().__init__()
        self.bilinear_type = bilinear_type
        self.interact_dim = int(num_fields * (num_fields - 1) / 2)
        if self.bilinear_type == "field_all":
            self.bilinear_W = nn.Parameter(torch.empty(embedding_dim, embedding_dim))
        elif self.bilinear_type == "field_each":
            self.bilinear_W = nn.Parameter(torch.empty(num_fields, embedding_dim, embedding_dim))
        else:
            self.bilinear_W = nn.Parameter(torch.empty(self.interact_dim, embedding_dim, embedding_dim))
        self.register_buffer("triu_index", torch.triu_indices(num_fields, num_fields, offset=1))
        nn.init.xavier_normal_(self.bilinear_W)

    def forward(self, feature_emb):
        if self.bilinear_type == "field_interaction":
            left_emb = torch.index_select(feature_emb, 1, self.triu_index[0])
            right_emb = torch.index_select(feature_emb, 1, self.triu_index[1])
            bilinear_out = torch.matmul(left_emb.unsqueeze(2), self.bilinear_W).squeeze(2) * right_emb
        else:
            if self.bilinear_type == "field_all":
                hidden_emb = torch.matmul(feature_emb, self.bilinear_W)
            else:
                hidden_emb = torch.matmul(feature_emb.unsqueeze(2), self.bilinear_W).squeeze(2)
            left_emb = torch.index_select(hidden_emb, 1, self.triu_index[0])
            right_emb = torch.index_select(feature_emb, 1, self.triu_index[1])
            bilinear_out = left_emb * right_emb
        return bilinear_out


class MLP_Block(nn.Module):
    def __init__(self, input_dim, hidden_units, output_dim=None):
        super().__init__()
        dense_layers = []
        hidden_units = [input_dim] + list(hidden_units)
        for idx in range(len(hidden_units) - 1):
            dense_layers.append(nn.Linear(hidden_units[idx], hidden_units[idx + 1], bias=True))
            dense_layers.append(nn.ReLU())
        if output_dim is not None:
            dense_layers.append(nn.Linear(hidden_units[-1], output_dim, bias=True))
        self.mlp = nn.Sequential(*dense_layers)

    def forward(self, inputs):
        return self.mlp(inputs)


class LogisticRegression(nn.Module):
    def __init__(self, vocabs, use_bias=True):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1)) if use_bias else None
        self.embedding_layer = FeatureEmbedding(vocabs, 1)

    def forward(self, X):
        embed_weights = self.embedding_layer(X)
        output = embed_weights.sum(dim=1)
        if self.bias is not None:
            output += self.bias
        return output


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        num_fields = len(VOCABS)
        self.embedding_layer = FeatureEmbedding(VOCABS, EMBEDDING_DIM)
        self.senet_layer = SqueezeExcitation(num_fields, REDUCTION_RATIO)
        self.bilinear_interaction1 = BilinearInteractionV2(num_fields, EMBEDDING_DIM, "field_interaction")
        self.bilinear_interaction2 = BilinearInteractionV2(num_fields, EMBEDDING_DIM, "field_interaction")
        self.lr_layer = LogisticRegression(VOCABS, use_bias=False)
        input_dim = num_fields * (num_fields - 1) * EMBEDDING_DIM
        self.dnn = MLP_Block(input_dim=input_dim, output_dim=1, hidden_units=HIDDEN_UNITS)
        self.output_activation = nn.Sigmoid()

    def forward(self, X):
        feature_emb = self.embedding_layer(X)
        senet_emb = self.senet_layer(feature_emb)
        bilinear_p = self.bilinear_interaction1(feature_emb)
        bilinear_q = self.bilinear_interaction2(senet_emb)
        comb_out = torch.flatten(torch.cat([bilinear_p, bilinear_q], dim=1), start_dim=1)
        dnn_out = self.dnn(comb_out)
        y_pred = self.lr_layer(X) + dnn_out
        y_pred = self.output_activation(y_pred)
        return y_pred


def get_inputs():
    return [torch.stack([torch.randint(0, v, (BATCH,)) for v in VOCABS], dim=1)]


def get_init_inputs():
    return []
