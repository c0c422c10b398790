"""EfficientNetV2-S's second stage as torchvision writes it (features[2]: four FusedMBConv
blocks of FusedMBConvConfig(expand_ratio 4, kernel 3, stride 2, 24 -> 48 channels), norm_layer
BatchNorm2d with eps 1e-3, in eval mode): each block a "fused expand" Conv2dNormActivation
(3 x 3 Conv2d without bias to 4x the input channels, BatchNorm, SiLU in place) and a project
Conv2dNormActivation (1 x 1 Conv2d to 48, BatchNorm, no activation); the first block has stride
2 (24 x 192 x 192 -> 48 x 96 x 96) and no residual, the other three add their input after
StochasticDepth (identity in inference) in place. Batch 8 images at torchvision's 384 x 384
inference size (the input is the stage-1 output, 24 channels at 192 x 192; a vision block)."""

from functools import partial

import torch
import torch.nn as nn

BATCH, IN_CHANNELS, SIZE = 8, 24, 192
# FusedMBConvConfig(expand_ratio, kernel, stride, input_channels, out_channels, num_layers)
STAGE = (4, 3, 2, 24, 48, 4)
TOTAL_STAGE_BLOCKS, BLOCKS_BEFORE, STOCHASTIC_DEPTH_PROB = 40, 2, 0.2


def _make_divisible(v: float, divisor: int, min_value: int | None = None) -> int:
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    # Make sure that round down does not go down by more than 10%.
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class FusedMBConvConfig:
    def __init__(self, expand_ratio, kernel, stride, input_channels, out_channels, num_layers):
        self.expand_ratio = expand_ratio
        self.kernel = kernel
        self.stride = stride
        self.input_channels = input_channels
        self.out_channels = out_channels
        self.num_layers = num_layers

    @staticmethod
    def adjust_channels(channels: int, width_mult: float, min_value: int | None = None) -> int:
        return _make_divisible(channels * width_mult, 8, min_value)


class Conv2dNormActivation(nn.Sequential):
    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size=3,
        stride=1,
        padding=None,
        groups=1,
        norm_layer=nn.BatchNorm2d,
        activation_layer=nn.ReLU,
        dilation=1,
        inplace=True,
        bias=None,
    ):
        if padding is None:
            padding = (kernel_size - 1) // 2 * dilation
        if bias is None:
            bias = norm_layer is None
        layers = [
            nn.Conv2d(
                in_channels,
                out_channels,
                kernel_size,
                stride,
                padding,
                dilation=dilation,
                groups=groups,
                bias=bias,
            )
        ]
        if norm_layer is not None:
            layers.append(norm_layer(out_channels))
        if activation_layer is not None:
            params = {} if inplace is None else {"inplace": inplace}
            layers.append(activation_layer(**params))
        super().__init__(*layers)
        self.out_channels = out_channels


def stochastic_depth(input: torch.Tensor, p: float, mode: str, training: bool = True) -> torch.Tensor:
    if p < 0.0 or p > 1.0:
        raise ValueError(f"drop probability has to be between 0 and 1, but got {p}")
    if mode not in ["batch", "row"]:
        raise ValueError(f"mode has to be either 'batch' or 'row', but got {mode}")
    if not training or p == 0.0:
        return input

    survival_rate = 1.0 - p
    if mode == "row":
        size = [input.shape[0]] + [1] * (input.ndim - 1)
    else:
        size = [1] * input.ndim
    noise = torch.empty(size, dtype=input.dtype, device=input.device)
    noise = noise.bernoulli_(survival_rate)
    if survival_rate > 0.0:
        noise.div_(survival_rate)
    return input * noise


class StochasticDepth(nn.Module):
    def __init__(self, p: float, mode: str) -> None:
        super().__init__()
        self.p = p
        self.mode = mode

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return stochastic_depth(input, self.p, self.mode, self.training)


class FusedMBConv(nn.Module):
    def __init__(self, cnf: FusedMBConvConfig, stochastic_depth_prob: float, norm_layer) -> None:
        super().__init__()

        if not (1 <= cnf.stride <= 2):
            raise ValueError("illegal stride value")

        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels

        layers: list[nn.Module] = []
        activation_layer = nn.SiLU

        expanded_channels = cnf.adjust_channels(cnf.input_channels, cnf.expand_ratio)
        if expanded_channels != cnf.input_channels:
            # fused expand
            layers.append(
                Conv2dNormActivation(
                    cnf.input_channels,
                    expanded_channels,
                    kernel_size=cnf.kernel,
                    stride=cnf.stride,
                    norm_layer=norm_layer,
                    activation_layer=activation_layer,
                )
            )

            # project
            layers.append(
                Conv2dNormActivation(
                    expanded_channels,
                    cnf.out_channels,
                    kernel_size=1,
                    norm_layer=norm_layer,
                    activation_layer=None,
                )
            )
        else:
            layers.append(
                Conv2dNormActivation(
                    cnf.input_channels,
                    cnf.out_channels,
                    kernel_size=cnf.kernel,
                    stride=cnf.stride,
                    norm_layer=norm_layer,
                    activation_layer=activation_layer,
                )
            )

        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
        self.out_channels = cnf.out_channels

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        result = self.block(input)
        if self.use_res_connect:
            result = self.stochastic_depth(result)
            result += input
        return result


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        norm_layer = partial(nn.BatchNorm2d, eps=1e-03)
        cnf = FusedMBConvConfig(*STAGE)
        stage: list[nn.Module] = []
        stage_block_id = BLOCKS_BEFORE
        for _ in range(cnf.num_layers):
            # copy to avoid modifications. shallow copy is enough
            block_cnf = FusedMBConvConfig(
                cnf.expand_ratio, cnf.kernel, cnf.stride, cnf.input_channels, cnf.out_channels, cnf.num_layers
            )

            # overwrite info if not the first conv in the stage
            if stage:
                block_cnf.input_channels = block_cnf.out_channels
                block_cnf.stride = 1

            # adjust stochastic depth probability based on the depth of the stage block
            sd_prob = STOCHASTIC_DEPTH_PROB * float(stage_block_id) / TOTAL_STAGE_BLOCKS

            stage.append(FusedMBConv(block_cnf, sd_prob, norm_layer))
            stage_block_id += 1
        self.features = nn.Sequential(*stage)
        with torch.no_grad():  # trained statistics
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 2.0)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)
        self.eval()

    def forward(self, x):
        return self.features(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return []
