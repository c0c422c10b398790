"""EnCodec 24 kHz neural audio codec (facebook/encodec_24khz): the SEANet convolutional encoder that turns
the waveform into 75 Hz latent frames before the residual vector quantizer, as Hugging Face
transformers writes it in models/encodec/modeling_encodec.py (EncodecEncoder, EncodecConv1d,
EncodecResnetBlock, EncodecLSTM), in its static-padding form (the padding amounts are Python ints
computed from the input length, as in transformers <= 4.38; newer versions compute the same numbers
with tensor buffers). Causal convolutions with reflect padding on the left (kernel - stride) and the
extra right padding that makes the length a whole number of frames; every Conv1d is wrapped in
weight normalisation (torch.nn.utils.parametrizations.weight_norm, recomputed at each call).
Stem conv 1 -> 32 channels (k7), then 4 stages with ratios 2, 4, 5, 8 (reversed upsampling_ratios):
a residual unit (ELU, conv k3 dim -> dim/2, ELU, conv k1 dim/2 -> dim, plus a 1x1 conv shortcut)
and ELU + strided downsampling conv (kernel 2*ratio, channels doubled); then a 2-layer LSTM(512)
with a residual connection over time, ELU, and the final conv 512 -> 128 (k7). Weights follow
EncodecPreTrainedModel._init_weights (Kaiming-normal convs, Xavier LSTM) with perturbed weight-norm gains.
Use case: compressing 10-second 24 kHz mono clips, batch 4 (240000 samples -> 750 frames)."""

import math

import torch
import torch.nn as nn

AUDIO_CHANNELS = 1
NUM_FILTERS = 32
KERNEL_SIZE = 7
LAST_KERNEL_SIZE = 7
RESIDUAL_KERNEL_SIZE = 3
DILATION_GROWTH_RATE = 2
NUM_RESIDUAL_LAYERS = 1
UPSAMPLING_RATIOS = [8, 5, 4, 2]
COMPRESS = 2
NUM_LSTM_LAYERS = 2
HIDDEN_SIZE = 128
USE_CAUSAL_CONV = True
PAD_MODE = "reflect"
NORM_TYPE = "weight_norm"
USE_CONV_SHORTCUT = True
SAMPLING_RATE = 24000
BATCH, SECONDS = 4, 10
NUM_SAMPLES = SAMPLING_RATE * SECONDS


class EncodecConv1d(nn.Module):
    """Conv1d with asymmetric or causal padding and normalization."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, dilation=1):
        super().__init__()
        self.causal = USE_CAUSAL_CONV
        self.pad_mode = PAD_MODE
        self.norm_type = NORM_TYPE

        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, stride, dilation=dilation)
        if self.norm_type == "weight_norm":
            self.conv = nn.utils.parametrizations.weight_norm(self.conv)
        elif self.norm_type == "time_group_norm":
            self.norm = nn.GroupNorm(1, out_channels)

    @staticmethod
    def _get_extra_padding_for_conv1d(hidden_states, kernel_size, stride, padding_total=0):
        """See `pad_for_conv1d`."""
        length = hidden_states.shape[-1]
        n_frames = (length - kernel_size + padding_total) / stride + 1
        ideal_length = (math.ceil(n_frames) - 1) * stride + (kernel_size - padding_total)
        return ideal_length - length

    @staticmethod
    def _pad1d(hidden_states, paddings, mode="zero", value=0.0):
        """Tiny wrapper around torch.nn.functional.pad, just to allow for reflect padding on small input.
        If this is the case, we insert extra 0 padding to the right before the reflection happens.
        """
        length = hidden_states.shape[-1]
        padding_left, padding_right = paddings
        if not mode == "reflect":
            return nn.functional.pad(hidden_states, paddings, mode, value)

        max_pad = max(padding_left, padding_right)
        extra_pad = 0
        if length <= max_pad:
            extra_pad = max_pad - length + 1
            hidden_states = nn.functional.pad(hidden_states, (0, extra_pad))
        padded = nn.functional.pad(hidden_states, paddings, mode, value)
        end = padded.shape[-1] - extra_pad
        return padded[..., :end]

    def forward(self, hidden_states):
        kernel_size = self.conv.kernel_size[0]
        stride = self.conv.stride[0]
        dilation = self.conv.dilation[0]
        kernel_size = (kernel_size - 1) * dilation + 1  # effective kernel size with dilations
        padding_total = kernel_size - stride
        extra_padding = self._get_extra_padding_for_conv1d(hidden_states, kernel_size, stride, padding_total)

        if self.causal:
            # Left padding for causal
            hidden_states = self._pad1d(hidden_states, (padding_total, extra_padding), mode=self.pad_mode)
        else:
            # Asymmetric padding required for odd strides
            padding_right = padding_total // 2
            padding_left = padding_total - padding_right
            hidden_states = self._pad1d(
                hidden_states, (padding_left, padding_right + extra_padding), mode=self.pad_mode
            )

        hidden_states = self.conv(hidden_states)

        if self.norm_type == "time_group_norm":
            hidden_states = self.norm(hidden_states)

        return hidden_states


class EncodecLSTM(nn.Module):
    """LSTM without worrying about the hidden state, nor the layout of the data. Expects input as convolutional layout."""

    def __init__(self, dimension):
        super().__init__()
        self.lstm = nn.LSTM(dimension, dimension, NUM_LSTM_LAYERS)

    def forward(self, hidden_states):
        hidden_states = hidden_states.permute(2, 0, 1)
        hidden_states = self.lstm(hidden_states)[0] + hidden_states
        hidden_states = hidden_states.permute(1, 2, 0)
        return hidden_states


class EncodecResnetBlock(nn.Module):
    """Residual block from SEANet model as used by EnCodec."""

    def __init__(self, dim, dilations):
        super().__init__()
        kernel_sizes = (RESIDUAL_KERNEL_SIZE, 1)
        if len(kernel_sizes) != len(dilations):
            raise ValueError("Number of kernel sizes should match number of dilations")

        hidden = dim // COMPRESS
        block = []
        for i, (kernel_size, dilation) in enumerate(zip(kernel_sizes, dilations, strict=True)):
            in_chs = dim if i == 0 else hidden
            out_chs = dim if i == len(kernel_sizes) - 1 else hidden
            block += [nn.ELU()]
            block += [EncodecConv1d(in_chs, out_chs, kernel_size, dilation=dilation)]
        self.block = nn.ModuleList(block)

        if USE_CONV_SHORTCUT:
            self.shortcut = EncodecConv1d(dim, dim, kernel_size=1)
        else:
            self.shortcut = nn.Identity()

    def forward(self, hidden_states):
        residual = hidden_states
        for layer in self.block:
            hidden_states = layer(hidden_states)

        return self.shortcut(residual) + hidden_states


class EncodecEncoder(nn.Module):
    """SEANet encoder as used by EnCodec."""

    def __init__(self):
        super().__init__()
        model = [EncodecConv1d(AUDIO_CHANNELS, NUM_FILTERS, KERNEL_SIZE)]
        scaling = 1

        # Downsample to raw audio scale
        for ratio in reversed(UPSAMPLING_RATIOS):
            current_scale = scaling * NUM_FILTERS
            # Add residual layers
            for j in range(NUM_RESIDUAL_LAYERS):
                model += [EncodecResnetBlock(current_scale, [DILATION_GROWTH_RATE**j, 1])]
            # Add downsampling layers
            model += [nn.ELU()]
            model += [EncodecConv1d(current_scale, current_scale * 2, kernel_size=ratio * 2, stride=ratio)]
            scaling *= 2

        model += [EncodecLSTM(scaling * NUM_FILTERS)]
        model += [nn.ELU()]
        model += [EncodecConv1d(scaling * NUM_FILTERS, HIDDEN_SIZE, LAST_KERNEL_SIZE)]

        self.layers = nn.ModuleList(model)

    def forward(self, hidden_states):
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = EncodecEncoder()
        with torch.no_grad():  # EncodecPreTrainedModel._init_weights
            for m in self.modules():
                if isinstance(m, nn.Conv1d):
                    weight = torch.empty_like(m.weight)
                    nn.init.kaiming_normal_(weight)
                    m.weight = weight  # weight_norm's right_inverse sets g = ||v|| and v
                    k = math.sqrt(m.groups / (m.in_channels * m.kernel_size[0]))
                    nn.init.uniform_(m.bias, a=-k, b=k)
                    g = m.parametrizations.weight.original0
                    g.mul_(torch.empty_like(g).uniform_(0.8, 1.2))  # trained-looking gains
                elif isinstance(m, nn.LSTM):
                    for name, param in m.named_parameters():
                        if "weight" in name:
                            nn.init.xavier_uniform_(param)
                        elif "bias" in name:
                            nn.init.constant_(param, 0.0)
        self.eval()

    def forward(self, input_values):
        # EncodecModel._encode_frame for chunk_length=None: the whole clip is one frame
        return self.encoder(input_values)


def get_inputs():
    return [0.1 * torch.randn(BATCH, AUDIO_CHANNELS, NUM_SAMPLES)]


def get_init_inputs():
    return []
