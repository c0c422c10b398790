"""xDeepFM's Compressed Interaction Network for click-through prediction (a recommender; DeepCTR-
torch's CIN and cin_linear as xDeepFM builds them) over the 26 sparse Criteo fields' 10-dim
embeddings (the xDeepFM paper's embedding size) with DeepCTR's default CIN layer sizes (256, 128)
and split_half: each layer forms the outer product of the previous hidden maps with the field
embeddings by einsum('bhd,bmd->bhmd'), reshapes it to (batch, h*m, dim), applies a kernel-1
Conv1d (676 -> 256, then 128*26 = 3328 -> 128) and ReLU, splits half to the next layer and half
to the output, and the outputs are concatenated, summed over the embedding dimension and mapped
by Linear(256, 1, no bias) to the CIN logit; batch 4096."""

import torch
import torch.nn as nn

FIELDS, DIM, LAYER_SIZE, BATCH = 26, 10, (256, 128), 4096


class CIN(nn.Module):
    def __init__(self, field_size, layer_size=(128, 128), split_half=True):
        super().__init__()
        self.layer_size = layer_size
        self.field_nums = [field_size]
        self.split_half = split_half
        self.activation = nn.ReLU(inplace=True)
        self.conv1ds = nn.ModuleList()
        for _i, size in enumerate(self.layer_size):
            self.conv1ds.append(nn.Conv1d(self.field_nums[-1] * self.field_nums[0], size, 1))
            if self.split_half:
                self.field_nums.append(size // 2)
            else:
                self.field_nums.append(size)

    def forward(self, inputs):
        batch_size = inputs.shape[0]
        dim = inputs.shape[-1]
        hidden_nn_layers = [inputs]
        final_result = []
        for i, size in enumerate(self.layer_size):
            # x^(k-1) * x^0
            x = torch.einsum("bhd,bmd->bhmd", hidden_nn_layers[-1], hidden_nn_layers[0])
            # x.shape = (batch_size , hi * m, dim)
            x = x.reshape(batch_size, hidden_nn_layers[-1].shape[1] * hidden_nn_layers[0].shape[1], dim)
            # x.shape = (batch_size , hi, dim)
            x = self.conv1ds[i](x)
            curr_out = self.activation(x)
            if self.split_half:
                if i != len(self.layer_size) - 1:
                    next_hidden, direct_connect = torch.split(curr_out, 2 * [size // 2], 1)
                else:
                    direct_connect = curr_out
                    next_hidden = 0
            else:
                direct_connect = curr_out
                next_hidden = curr_out
            final_result.append(direct_connect)
            hidden_nn_layers.append(next_hidden)
        result = torch.cat(final_result, dim=1)
        result = torch.sum(result, -1)
        return result


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.cin = CIN(FIELDS, LAYER_SIZE, split_half=True)
        featuremap_num = sum(LAYER_SIZE[:-1]) // 2 + LAYER_SIZE[-1]
        self.cin_linear = nn.Linear(featuremap_num, 1, bias=False)

    def forward(self, cin_input):
        cin_output = self.cin(cin_input)
        return self.cin_linear(cin_output)


def get_inputs():
    return [torch.randn(BATCH, FIELDS, DIM)]  # the stacked field embeddings


def get_init_inputs():
    return []
