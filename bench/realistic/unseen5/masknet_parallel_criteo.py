"""MaskNet for click-through prediction (a recommender; Weibo's instance-guided mask model) as
FuxiCTR writes it, model_type ParallelMaskNet: the 39 Criteo fields (13 discretised numeric + 26
categorical, about 1.1M ids after min-count filtering) looked up in embedding tables of width 16
and stacked; emb_layernorm (a separate LayerNorm(16) per field, applied to the 39 chunks and
concatenated) gives V_hidden; six MaskBlocks in parallel, each an instance-guided mask from the
raw flattened embedding (Linear 624 -> 624, ReLU, Linear 624 -> 624, reduction_ratio 1) times
the normalised embedding, then Linear 624 -> 64 without bias, LayerNorm, ReLU; the six outputs
concatenated to 384 and the MLP_Block 384 -> 400 -> 400 -> 400 -> 1 (ReLU) with the sigmoid
output activation. Batch 4096 candidates (net_dropout 0)."""

import torch
import torch.nn as nn

VOCABS = (
    # 13 numeric fields, discretised
    48, 102, 117, 43, 221, 112, 80, 54, 93, 11, 31, 42, 76,
    # 26 categorical fields, after min-count-10 filtering
    1445, 553, 175781, 128509, 305, 19, 11930, 629, 3, 39529, 5130, 156655, 3175,
    26, 11042, 165512, 10, 4632, 2004, 4, 169808, 17, 15, 51217, 69, 35958,
)  # fmt: skip
EMBEDDING_DIM, PARALLEL_NUM_BLOCKS, PARALLEL_BLOCK_DIM, REDUCTION_RATIO = 16, 6, 64, 1
DNN_HIDDEN_UNITS = [400, 400, 400]
BATCH = 4096


def get_activation(activation, hidden_units=None):
    if isinstance(activation, str):
        if activation.lower() == "relu":
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
            return [get_activation(act) for act in activation]
        return [get_activation(act) for act in activation]
    return activation


class FeatureEmbedding(nn.Module):
    def __init__(self, vocabs, embedding_dim):
        super().__init__()
        self.embedding_layers = nn.ModuleList([nn.Embedding(v, embedding_dim) for v in vocabs])

    def forward(self, X):
        feature_emb_list = [layer(X[:, i]) for i, layer in enumerate(self.embedding_layers)]
        return torch.stack(feature_emb_list, dim=1)


class MLP_Block(nn.Module):
    def __init__(
        self,
        input_dim,
        hidden_units=(),
        hidden_activations="ReLU",
        output_dim=None,
        output_activation=None,
        dropout_rates=0.0,
        batch_norm=False,
        use_bias=True,
    ):
        super().__init__()
        dense_layers = []
        if not isinstance(dropout_rates, list):
            dropout_rates = [dropout_rates] * len(hidden_units)
        if not isinstance(hidden_activations, list):
            hidden_activations = [hidden_activations] * len(hidden_units)
        hidden_activations = get_activation(hidden_activations, hidden_units)
        hidden_units = [input_dim] + list(hidden_units)
        for idx in range(len(hidden_units) - 1):
            dense_layers.append(nn.Linear(hidden_units[idx], hidden_units[idx + 1], bias=use_bias))
            if batch_norm:
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


class MaskBlock(nn.Module):
    def __init__(
        self,
        input_dim,
        hidden_dim,
        output_dim,
        hidden_activation="ReLU",
        reduction_ratio=1,
        dropout_rate=0,
        layer_norm=True,
    ):
        super().__init__()
        self.mask_layer = nn.Sequential(
            nn.Linear(input_dim, int(hidden_dim * reduction_ratio)),
            nn.ReLU(),
            nn.Linear(int(hidden_dim * reduction_ratio), hidden_dim),
        )
        hidden_layers = [nn.Linear(hidden_dim, output_dim, bias=False)]
        if layer_norm:
            hidden_layers.append(nn.LayerNorm(output_dim))
        hidden_layers.append(get_activation(hidden_activation))
        if dropout_rate > 0:
            hidden_layers.append(nn.Dropout(p=dropout_rate))
        self.hidden_layer = nn.Sequential(*hidden_layers)

    def forward(self, V_emb, V_hidden):
        V_mask = self.mask_layer(V_emb)
        v_out = self.hidden_layer(V_mask * V_hidden)
        return v_out


class ParallelMaskNet(nn.Module):
    def __init__(
        self,
        input_dim,
        output_dim=None,
        output_activation=None,
        num_blocks=1,
        block_dim=64,
        hidden_units=(),
        hidden_activations="ReLU",
        reduction_ratio=1,
        dropout_rates=0,
        layer_norm=True,
    ):
        super().__init__()
        self.num_blocks = num_blocks
        self.mask_blocks = nn.ModuleList(
            [
                MaskBlock(
                    input_dim,
                    input_dim,
                    block_dim,
                    hidden_activations,
                    reduction_ratio,
                    dropout_rates,
                    layer_norm,
                )
                for _ in range(num_blocks)
            ]
        )

        self.dnn = MLP_Block(
            input_dim=block_dim * num_blocks,
            output_dim=output_dim,
            hidden_units=hidden_units,
            hidden_activations=hidden_activations,
            output_activation=output_activation,
            dropout_rates=dropout_rates,
        )

    def forward(self, V_emb, V_hidden):
        block_out = []
        for i in range(self.num_blocks):
            block_out.append(self.mask_blocks[i](V_emb, V_hidden))
        concat_out = torch.cat(block_out, dim=-1)
        v_out = self.dnn(concat_out)
        return v_out


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_fields = len(VOCABS)
        self.embedding_layer = FeatureEmbedding(VOCABS, EMBEDDING_DIM)
        self.mask_net = ParallelMaskNet(
            input_dim=self.num_fields * EMBEDDING_DIM,
            output_dim=1,
            output_activation=nn.Sigmoid(),
            num_blocks=PARALLEL_NUM_BLOCKS,
            block_dim=PARALLEL_BLOCK_DIM,
            hidden_units=DNN_HIDDEN_UNITS,
            hidden_activations="ReLU",
            reduction_ratio=REDUCTION_RATIO,
            dropout_rates=0,
            layer_norm=True,
        )
        self.emb_norm = nn.ModuleList(nn.LayerNorm(EMBEDDING_DIM) for _ in range(self.num_fields))
        with torch.no_grad():  # BaseModel.reset_parameters (xavier_normal_ Linear weights), trained norms
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.xavier_normal_(m.weight)
                    if m.bias is not None:
                        m.bias.zero_()
                if isinstance(m, nn.LayerNorm):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.1, 0.1)
        self.eval()

    def forward(self, X):
        feature_emb = self.embedding_layer(X)
        if self.emb_norm is not None:
            feat_list = feature_emb.chunk(self.num_fields, dim=1)
            V_hidden = torch.cat([self.emb_norm[i](feat) for i, feat in enumerate(feat_list)], dim=1)
        else:
            V_hidden = feature_emb
        y_pred = self.mask_net(feature_emb.flatten(start_dim=1), V_hidden.flatten(start_dim=1))
        return y_pred


def get_inputs():
    return [torch.stack([torch.randint(0, v, (BATCH,)) for v in VOCABS], dim=1)]


def get_init_inputs():
    return []
