"""Field-aware Neural Factorization Machine (FNFM) on Criteo as rixwew/pytorch-fm writes it
(torchfm/model/fnfm.py with torchfm/layer.py FeaturesLinear, FieldAwareFactorizationMachine,
MultiLayerPerceptron). 39 fields (13 log^2-bucketised numeric + 26 categorical, vocabularies after
the min-count-10 threshold, 1.09M ids in total) share one offset id space; the field-aware FM keeps
one embedding table per field (39 tables x 1.09M x 4) and, in the library's Python double loop,
multiplies xs[j][:, i] * xs[i][:, j] for all 741 field pairs, stacks them (B, 741, 4), flattens to
2964 features -> BatchNorm1d -> MLP (2964 -> 64 -> BN -> ReLU -> 1); plus the first-order
FeaturesLinear term; sigmoid. Eval mode (dropout off, BatchNorm running stats). The FFM tables
keep PyTorch's default N(0, 1) embedding init (pytorch-fm re-inits with xavier_uniform_, which
makes the cross terms vanish for 1M-row tables); first-order weights / BN stats are set to
trained-looking values. Use case: CTR scoring of 4096 impressions per request batch."""

import torch
import torch.nn as nn

FIELD_DIMS = (
    49,
    101,
    126,
    45,
    223,
    118,
    84,
    76,
    95,
    9,
    30,
    40,
    75,
    1458,
    555,
    193949,
    138801,
    306,
    19,
    11970,
    634,
    4,
    42646,
    5178,
    192773,
    3175,
    27,
    11422,
    181075,
    11,
    4654,
    2032,
    5,
    189657,
    18,
    16,
    59697,
    86,
    45571,
)
EMBED_DIM = 4
MLP_DIMS = (64,)
DROPOUTS = (0.2, 0.2)
BATCH = 4096


def _offsets(field_dims):
    return torch.tensor((0, *torch.cumsum(torch.tensor(field_dims), 0)[:-1].tolist()), dtype=torch.long)


class FeaturesLinear(torch.nn.Module):
    def __init__(self, field_dims, output_dim=1):
        super().__init__()
        self.fc = torch.nn.Embedding(sum(field_dims), output_dim)
        self.bias = torch.nn.Parameter(torch.zeros((output_dim,)))
        self.register_buffer("offsets", _offsets(field_dims))

    def forward(self, x):
        """
        :param x: Long tensor of size ``(batch_size, num_fields)``
        """
        x = x + self.offsets.unsqueeze(0)  # pytorch-fm: x.new_tensor(self.offsets) from a numpy array
        return torch.sum(self.fc(x), dim=1) + self.bias


class FieldAwareFactorizationMachine(torch.nn.Module):
    def __init__(self, field_dims, embed_dim):
        super().__init__()
        self.num_fields = len(field_dims)
        self.embeddings = torch.nn.ModuleList(
            [torch.nn.Embedding(sum(field_dims), embed_dim) for _ in range(self.num_fields)]
        )
        self.register_buffer("offsets", _offsets(field_dims))

    def forward(self, x):
        """
        :param x: Long tensor of size ``(batch_size, num_fields)``
        """
        x = x + self.offsets.unsqueeze(0)  # pytorch-fm: x.new_tensor(self.offsets) from a numpy array
        xs = [self.embeddings[i](x) for i in range(self.num_fields)]
        ix = list()
        for i in range(self.num_fields - 1):
            for j in range(i + 1, self.num_fields):
                ix.append(xs[j][:, i] * xs[i][:, j])
        ix = torch.stack(ix, dim=1)
        return ix


class MultiLayerPerceptron(torch.nn.Module):
    def __init__(self, input_dim, embed_dims, dropout, output_layer=True):
        super().__init__()
        layers = list()
        for embed_dim in embed_dims:
            layers.append(torch.nn.Linear(input_dim, embed_dim))
            layers.append(torch.nn.BatchNorm1d(embed_dim))
            layers.append(torch.nn.ReLU())
            layers.append(torch.nn.Dropout(p=dropout))
            input_dim = embed_dim
        if output_layer:
            layers.append(torch.nn.Linear(input_dim, 1))
        self.mlp = torch.nn.Sequential(*layers)

    def forward(self, x):
        """
        :param x: Float tensor of size ``(batch_size, embed_dim)``
        """
        return self.mlp(x)


class FieldAwareNeuralFactorizationMachineModel(torch.nn.Module):
    """
    A pytorch implementation of Field-aware Neural Factorization Machine.

    Reference:
        L Zhang, et al. Field-aware Neural Factorization Machine for Click-Through Rate Prediction, 2019.
    """

    def __init__(self, field_dims, embed_dim, mlp_dims, dropouts):
        super().__init__()
        self.linear = FeaturesLinear(field_dims)
        self.ffm = FieldAwareFactorizationMachine(field_dims, embed_dim)
        self.ffm_output_dim = len(field_dims) * (len(field_dims) - 1) // 2 * embed_dim
        self.bn = torch.nn.BatchNorm1d(self.ffm_output_dim)
        self.dropout = torch.nn.Dropout(dropouts[0])
        self.mlp = MultiLayerPerceptron(self.ffm_output_dim, mlp_dims, dropouts[1])

    def forward(self, x):
        """
        :param x: Long tensor of size ``(batch_size, num_fields)``
        """
        cross_term = self.ffm(x).view(-1, self.ffm_output_dim)
        cross_term = self.bn(cross_term)
        cross_term = self.dropout(cross_term)
        x = self.linear(x) + self.mlp(cross_term)
        return torch.sigmoid(x.squeeze(1))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = FieldAwareNeuralFactorizationMachineModel(FIELD_DIMS, EMBED_DIM, MLP_DIMS, DROPOUTS)
        with torch.no_grad():  # trained-looking first-order weights and BatchNorm statistics
            self.model.linear.fc.weight.normal_(0.0, 0.05)
            self.model.linear.bias.fill_(-1.2)
            for m in self.modules():
                if isinstance(m, nn.BatchNorm1d):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.1, 0.1)
                    m.running_mean.uniform_(-0.05, 0.05)
                    m.running_var.uniform_(0.8, 1.2)
            mlp_bn = self.model.mlp.mlp[1]
            mlp_bn.running_var.uniform_(0.2, 0.5)
        self.eval()

    def forward(self, x):
        return self.model(x)


def get_inputs():
    field_dims = torch.tensor(FIELD_DIMS)
    x = (torch.rand(BATCH, len(FIELD_DIMS)) * field_dims[None, :]).long()
    x = torch.minimum(x, field_dims[None, :] - 1)
    return [x]


def get_init_inputs():
    return []
