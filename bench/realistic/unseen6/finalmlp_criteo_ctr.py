"""FinalMLP (Mao et al., AAAI 2023), a two-stream MLP recommender for CTR prediction, as
FuxiCTR writes it (model_zoo/FinalMLP/src/FinalMLP.py with fuxictr's FeatureEmbedding and
MLP_Block) at its FinalMLP_default template (embedding_dim 16, mlp1_hidden_units [1024, 512],
mlp2_hidden_units [1024, 512, 256], fs_hidden_units [1024, 512], num_heads 2, batch_size 10000),
here with the MLP_Blocks' batch_norm option on (Linear, BatchNorm1d in eval mode, ReLU). On
Criteo's 39 fields: FeatureEmbeddingDict embeds the 13 numeric fields with nn.Linear(1, 16,
bias=False) of the value and the 26 categorical fields with one nn.Embedding each, dict2tensor
stacks them to [B, 39, 16], flattened to 624. FeatureSelection's two gates run an MLP_Block
(ReLU hidden, Sigmoid output) on a learnt context bias repeated over the batch, times 2, and gate
the flat embedding elementwise; the two streams run MLP1 and MLP2; InteractionAggregation fuses
them: w_x(x) + w_y(y) plus the multi-head bilinear term (two chained torch.matmul through w_xy
viewed per head, summed over heads); then the sigmoid output activation. A recommender (CTR
ranking) block scoring one evaluation batch of 10,000 impressions."""

# ruff: noqa: B006  (FuxiCTR's signatures keep their list defaults)
from collections import OrderedDict

import torch
from torch import nn

EMBEDDING_DIM, NUM_HEADS, BATCH = 16, 2, 10000
MLP1_HIDDEN_UNITS, MLP2_HIDDEN_UNITS, FS_HIDDEN_UNITS = [1024, 512], [1024, 512, 256], [1024, 512]
NUM_NUMERIC = 13
# Criteo's 26 categorical fields, vocabularies as a min-count filter leaves them (plus OOV/padding)
CATEGORICAL_VOCAB_SIZES = [
    1445, 555, 175781, 128509, 305, 19, 11930, 629, 3, 39529, 5128, 156655, 3175,
    26, 11042, 148912, 10, 4559, 2002, 4, 153016, 17, 15, 52989, 81, 40954,
]  # fmt: skip


class FeatureMap:
    def __init__(self):
        self.features = OrderedDict()
        for i in range(NUM_NUMERIC):
            self.features[f"I{i + 1}"] = {"type": "numeric", "source": ""}
        for i, vocab_size in enumerate(CATEGORICAL_VOCAB_SIZES):
            self.features[f"C{i + 1}"] = {"type": "categorical", "source": "", "vocab_size": vocab_size}
        self.num_fields = len(self.features)


def get_activation(activation, hidden_units=None):
    if isinstance(activation, str):
        if activation.lower() in ["prelu", "dice"]:
            raise NotImplementedError
        elif activation.lower() == "relu":
            return nn.ReLU()
        elif activation.lower() == "sigmoid":
            return nn.Sigmoid()
        elif activation.lower() == "tanh":
            return nn.Tanh()
        else:
            return getattr(nn, activation)()
    elif isinstance(activation, list):
        if hidden_units is not None:
            assert len(activation) == len(hidden_units)
            return [get_activation(act, units) for act, units in zip(activation, hidden_units, strict=False)]
        else:
            return [get_activation(act) for act in activation]
    return activation


class MLP_Block(nn.Module):
    def __init__(
        self,
        input_dim,
        hidden_units=[],
        hidden_activations="ReLU",
        output_dim=None,
        output_activation=None,
        dropout_rates=0.0,
        batch_norm=False,
        bn_only_once=False,  # Set True for inference speed up
        use_bias=True,
    ):
        super().__init__()
        dense_layers = []
        if not isinstance(dropout_rates, list):
            dropout_rates = [dropout_rates] * len(hidden_units)
        if not isinstance(hidden_activations, list):
            hidden_activations = [hidden_activations] * len(hidden_units)
        hidden_activations = get_activation(hidden_activations, hidden_units)
        hidden_units = [input_dim] + hidden_units
        if batch_norm and bn_only_once:
            dense_layers.append(nn.BatchNorm1d(input_dim))
        for idx in range(len(hidden_units) - 1):
            dense_layers.append(nn.Linear(hidden_units[idx], hidden_units[idx + 1], bias=use_bias))
            if batch_norm and not bn_only_once:
                dense_layers.append(nn.BatchNorm1d(hidden_units[idx + 1]))
            if hidden_activations[idx]:
                dense_layers.append(hidden_activations[idx])
            if dropout_rates[idx] > 0:
                dense_layers.append(nn.Dropout(p=dropout_rates[idx]))
        if output_dim is not None:
            dense_layers.append(nn.Linear(hidden_units[-1], output_dim, bias=use_bias))
        if output_activation is not None:
            dense_layers.append(get_activation(output_activation))
        self.mlp = nn.Sequential(*dense_layers)  # * used to unpack list

    def forward(self, inputs):
        return self.mlp(inputs)


class FeatureEmbeddingDict(nn.Module):
    def __init__(self, feature_map, embedding_dim):
        super().__init__()
        self._feature_map = feature_map
        self.embedding_layers = nn.ModuleDict()
        self.feature_encoders = nn.ModuleDict()
        for feature, feature_spec in self._feature_map.features.items():
            feat_dim = feature_spec.get("embedding_dim", embedding_dim)
            if feature_spec["type"] == "numeric":
                self.embedding_layers[feature] = nn.Linear(1, feat_dim, bias=False)
            elif feature_spec["type"] in ["categorical", "sequence"]:
                padding_idx = feature_spec.get("padding_idx", None)
                self.embedding_layers[feature] = nn.Embedding(
                    feature_spec["vocab_size"], feat_dim, padding_idx=padding_idx
                )

    def dict2tensor(
        self, embedding_dict, feature_list=[], feature_source=[], feature_type=[], flatten_emb=False
    ):
        if type(feature_source) is not list:
            feature_source = [feature_source]
        if type(feature_type) is not list:
            feature_type = [feature_type]
        feature_emb_list = []
        for feature, feature_spec in self._feature_map.features.items():
            if feature_source and feature_spec["source"] not in feature_source:
                continue
            if feature_type and feature_spec["type"] not in feature_type:
                continue
            if feature_list and feature not in feature_list:
                continue
            if feature in embedding_dict:
                feature_emb_list.append(embedding_dict[feature])
        if flatten_emb:
            feature_emb = torch.cat(feature_emb_list, dim=-1)
        else:
            feature_emb = torch.stack(feature_emb_list, dim=1)
        return feature_emb

    def forward(self, inputs, feature_source=[], feature_type=[]):
        if type(feature_source) is not list:
            feature_source = [feature_source]
        if type(feature_type) is not list:
            feature_type = [feature_type]
        feature_emb_dict = OrderedDict()
        for feature, feature_spec in self._feature_map.features.items():
            if feature_source and feature_spec["source"] not in feature_source:
                continue
            if feature_type and feature_spec["type"] not in feature_type:
                continue
            if feature in self.embedding_layers:
                if feature_spec["type"] == "numeric":
                    inp = inputs[feature].float().view(-1, 1)
                    embeddings = self.embedding_layers[feature](inp)
                elif feature_spec["type"] == "categorical":
                    inp = inputs[feature].long()
                    embeddings = self.embedding_layers[feature](inp)
                elif feature_spec["type"] == "sequence":
                    inp = inputs[feature].long()
                    embeddings = self.embedding_layers[feature](inp)
                else:
                    raise NotImplementedError
                if feature in self.feature_encoders:
                    embeddings = self.feature_encoders[feature](embeddings)
                feature_emb_dict[feature] = embeddings
        return feature_emb_dict


class FeatureEmbedding(nn.Module):
    def __init__(self, feature_map, embedding_dim):
        super().__init__()
        self.embedding_layer = FeatureEmbeddingDict(feature_map, embedding_dim)

    def forward(self, X, feature_source=[], feature_type=[], flatten_emb=False):
        feature_emb_dict = self.embedding_layer(X, feature_source=feature_source, feature_type=feature_type)
        feature_emb = self.embedding_layer.dict2tensor(feature_emb_dict, flatten_emb=flatten_emb)
        return feature_emb


class FeatureSelection(nn.Module):
    def __init__(
        self, feature_map, feature_dim, embedding_dim, fs_hidden_units=[], fs1_context=[], fs2_context=[]
    ):
        super().__init__()
        self.fs1_context = fs1_context
        if len(fs1_context) == 0:
            self.fs1_ctx_bias = nn.Parameter(torch.zeros(1, embedding_dim))
        else:
            raise NotImplementedError
        self.fs2_context = fs2_context
        if len(fs2_context) == 0:
            self.fs2_ctx_bias = nn.Parameter(torch.zeros(1, embedding_dim))
        else:
            raise NotImplementedError
        self.fs1_gate = MLP_Block(
            input_dim=embedding_dim * max(1, len(fs1_context)),
            output_dim=feature_dim,
            hidden_units=fs_hidden_units,
            hidden_activations="ReLU",
            output_activation="Sigmoid",
            batch_norm=False,
        )
        self.fs2_gate = MLP_Block(
            input_dim=embedding_dim * max(1, len(fs2_context)),
            output_dim=feature_dim,
            hidden_units=fs_hidden_units,
            hidden_activations="ReLU",
            output_activation="Sigmoid",
            batch_norm=False,
        )

    def forward(self, X, flat_emb):
        if len(self.fs1_context) == 0:
            fs1_input = self.fs1_ctx_bias.repeat(flat_emb.size(0), 1)
        else:
            fs1_input = self.fs1_ctx_emb(X).flatten(start_dim=1)
        gt1 = self.fs1_gate(fs1_input) * 2
        feature1 = flat_emb * gt1
        if len(self.fs2_context) == 0:
            fs2_input = self.fs2_ctx_bias.repeat(flat_emb.size(0), 1)
        else:
            fs2_input = self.fs2_ctx_emb(X).flatten(start_dim=1)
        gt2 = self.fs2_gate(fs2_input) * 2
        feature2 = flat_emb * gt2
        return feature1, feature2


class InteractionAggregation(nn.Module):
    def __init__(self, x_dim, y_dim, output_dim=1, num_heads=1):
        super().__init__()
        assert x_dim % num_heads == 0 and y_dim % num_heads == 0, "Input dim must be divisible by num_heads!"
        self.num_heads = num_heads
        self.output_dim = output_dim
        self.head_x_dim = x_dim // num_heads
        self.head_y_dim = y_dim // num_heads
        self.w_x = nn.Linear(x_dim, output_dim)
        self.w_y = nn.Linear(y_dim, output_dim)
        self.w_xy = nn.Parameter(torch.Tensor(num_heads * self.head_x_dim * self.head_y_dim, output_dim))
        nn.init.xavier_normal_(self.w_xy)

    def forward(self, x, y):
        output = self.w_x(x) + self.w_y(y)
        head_x = x.view(-1, self.num_heads, self.head_x_dim)
        head_y = y.view(-1, self.num_heads, self.head_y_dim)
        xy = torch.matmul(
            torch.matmul(head_x.unsqueeze(2), self.w_xy.view(self.num_heads, self.head_x_dim, -1)).view(
                -1, self.num_heads, self.output_dim, self.head_y_dim
            ),
            head_y.unsqueeze(-1),
        ).squeeze(-1)
        output += xy.sum(dim=1)
        return output


class FinalMLP(nn.Module):
    def __init__(
        self,
        feature_map,
        embedding_dim=10,
        mlp1_hidden_units=[64, 64, 64],
        mlp1_hidden_activations="ReLU",
        mlp1_dropout=0,
        mlp1_batch_norm=False,
        mlp2_hidden_units=[64, 64, 64],
        mlp2_hidden_activations="ReLU",
        mlp2_dropout=0,
        mlp2_batch_norm=False,
        use_fs=True,
        fs_hidden_units=[64],
        fs1_context=[],
        fs2_context=[],
        num_heads=1,
    ):
        super().__init__()
        self.embedding_layer = FeatureEmbedding(feature_map, embedding_dim)
        feature_dim = embedding_dim * feature_map.num_fields
        self.mlp1 = MLP_Block(
            input_dim=feature_dim,
            output_dim=None,
            hidden_units=mlp1_hidden_units,
            hidden_activations=mlp1_hidden_activations,
            output_activation=None,
            dropout_rates=mlp1_dropout,
            batch_norm=mlp1_batch_norm,
        )
        self.mlp2 = MLP_Block(
            input_dim=feature_dim,
            output_dim=None,
            hidden_units=mlp2_hidden_units,
            hidden_activations=mlp2_hidden_activations,
            output_activation=None,
            dropout_rates=mlp2_dropout,
            batch_norm=mlp2_batch_norm,
        )
        self.use_fs = use_fs
        if self.use_fs:
            self.fs_module = FeatureSelection(
                feature_map, feature_dim, embedding_dim, fs_hidden_units, fs1_context, fs2_context
            )
        self.fusion_module = InteractionAggregation(
            mlp1_hidden_units[-1], mlp2_hidden_units[-1], output_dim=1, num_heads=num_heads
        )
        self.output_activation = nn.Sigmoid()  # BaseModel: binary_classification

    def forward(self, X):
        flat_emb = self.embedding_layer(X).flatten(start_dim=1)
        if self.use_fs:
            feat1, feat2 = self.fs_module(X, flat_emb)
        else:
            feat1, feat2 = flat_emb, flat_emb
        y_pred = self.fusion_module(self.mlp1(feat1), self.mlp2(feat2))
        y_pred = self.output_activation(y_pred)
        return_dict = {"y_pred": y_pred}
        return return_dict


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.feature_map = FeatureMap()
        self.model = FinalMLP(
            self.feature_map,
            embedding_dim=EMBEDDING_DIM,
            mlp1_hidden_units=MLP1_HIDDEN_UNITS,
            mlp1_dropout=0.1,
            mlp1_batch_norm=True,
            mlp2_hidden_units=MLP2_HIDDEN_UNITS,
            mlp2_dropout=0.1,
            mlp2_batch_norm=True,
            use_fs=True,
            fs_hidden_units=FS_HIDDEN_UNITS,
            num_heads=NUM_HEADS,
        )
        with torch.no_grad():  # trained embeddings, statistics, gate contexts and output biases
            for m in self.modules():
                if isinstance(m, nn.Embedding):
                    m.weight.normal_(0.0, 0.5)
                if isinstance(m, nn.BatchNorm1d):
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.05, 0.2)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)
            self.model.fs_module.fs1_ctx_bias.normal_(0.0, 0.5)
            self.model.fs_module.fs2_ctx_bias.normal_(0.0, 0.5)
            self.model.fusion_module.w_x.bias.fill_(-1.0)
            self.model.fusion_module.w_y.bias.fill_(-1.0)
        self.eval()

    def forward(self, numeric, categorical):
        # BaseModel.get_inputs: one column per feature, keyed by name
        X = OrderedDict()
        for i in range(NUM_NUMERIC):
            X[f"I{i + 1}"] = numeric[:, i]
        for i in range(len(CATEGORICAL_VOCAB_SIZES)):
            X[f"C{i + 1}"] = categorical[:, i]
        return self.model(X)["y_pred"]


def get_inputs():
    numeric = torch.rand(BATCH, NUM_NUMERIC)  # min-max normalized counts
    categorical = torch.stack([torch.randint(0, v, (BATCH,)) for v in CATEGORICAL_VOCAB_SIZES], dim=1)
    return [numeric, categorical]


def get_init_inputs():
    return []
