"""Flan-T5-large's encoder feed-forward sub-layer as transformers writes it in modeling_t5.py
(T5LayerFF of the last encoder block with T5DenseGatedActDense, the gated-GELU FFN of T5 v1.1 /
Flan-T5: dense_act_fn "gelu_new"), then the encoder stack's final_layer_norm. T5LayerNorm is
T5's RMS norm (the variance of hidden_states.to(float32).pow(2).mean(-1), times rsqrt(variance +
1e-6), no mean and no bias, times weight); DenseReluDense computes act(wi_0(x)) * wi_1(x) (d_model
1024 -> d_ff 2816, both without bias, NewGELUActivation's tanh formula with torch.pow(x, 3.0)),
casts to wo's dtype if they differ (both fp32 here) and projects with wo 2816 -> 1024; the
residual adds it back (dropout inactive in inference). An NLP encoder block at summarization
serving: batch 16 documents of 512 tokens."""

import math

import torch
import torch.nn as nn

D_MODEL, D_FF, LAYER_NORM_EPSILON = 1024, 2816, 1e-6
BATCH, SEQ_LENGTH = 16, 512


class NewGELUActivation(nn.Module):
    """
    Implementation of the GELU activation function currently in Google BERT repo (identical to OpenAI GPT). Also see
    the Gaussian Error Linear Units paper: https://huggingface.co/papers/1606.08415
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return (
            0.5
            * input
            * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))
        )


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        """
        Construct a layernorm module in the T5 style. No bias and no subtraction of mean.
        """
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        # T5 uses a layer_norm which only scales and doesn't shift, which is also known as Root Mean
        # Square Layer Normalization https://huggingface.co/papers/1910.07467 thus variance is calculated
        # w/o mean and there is no bias. Additionally we want to make sure that the accumulation for
        # half-precision inputs is done in fp32

        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)

        # convert into half-precision if necessary
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)

        return self.weight * hidden_states


class T5DenseGatedActDense(nn.Module):
    def __init__(self, d_model, d_ff, dropout_rate):
        super().__init__()
        self.wi_0 = nn.Linear(d_model, d_ff, bias=False)
        self.wi_1 = nn.Linear(d_model, d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d_model, bias=False)
        self.dropout = nn.Dropout(dropout_rate)
        self.act = NewGELUActivation()

    def forward(self, hidden_states):
        hidden_gelu = self.act(self.wi_0(hidden_states))
        hidden_linear = self.wi_1(hidden_states)
        hidden_states = hidden_gelu * hidden_linear
        hidden_states = self.dropout(hidden_states)

        # To make 8bit quantization work for google/flan-t5-xxl, self.wo is kept in float32.
        # See https://github.com/huggingface/transformers/issues/20287
        # we also make sure the weights are not in `int8` in case users will force `_keep_in_fp32_modules` to be `None``
        if (
            isinstance(self.wo.weight, torch.Tensor)
            and hidden_states.dtype != self.wo.weight.dtype
            and self.wo.weight.dtype != torch.int8
        ):
            hidden_states = hidden_states.to(self.wo.weight.dtype)

        hidden_states = self.wo(hidden_states)
        return hidden_states


class T5LayerFF(nn.Module):
    def __init__(self, d_model, d_ff, dropout_rate, layer_norm_epsilon):
        super().__init__()
        self.DenseReluDense = T5DenseGatedActDense(d_model, d_ff, dropout_rate)

        self.layer_norm = T5LayerNorm(d_model, eps=layer_norm_epsilon)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, hidden_states):
        forwarded_states = self.layer_norm(hidden_states)
        forwarded_states = self.DenseReluDense(forwarded_states)
        hidden_states = hidden_states + self.dropout(forwarded_states)
        return hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer_ff = T5LayerFF(D_MODEL, D_FF, 0.1, LAYER_NORM_EPSILON)
        self.final_layer_norm = T5LayerNorm(D_MODEL, eps=LAYER_NORM_EPSILON)
        self.dropout = nn.Dropout(0.1)
        with torch.no_grad():  # trained norms
            for m in self.modules():
                if isinstance(m, T5LayerNorm):
                    m.weight.uniform_(0.2, 2.0)
        self.eval()

    def forward(self, hidden_states):
        # T5Block's last sub-layer (the fp16 clamp after it is skipped for fp32), then T5Stack's end
        hidden_states = self.layer_ff(hidden_states)
        hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states


def get_inputs():
    return [torch.randn(BATCH, SEQ_LENGTH, D_MODEL)]


def get_init_inputs():
    return []
