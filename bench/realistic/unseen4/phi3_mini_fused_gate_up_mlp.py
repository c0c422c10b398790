"""Phi-3-mini's (3.8B) feed-forward half of a decoder layer as transformers writes it
(Phi3DecoderLayer after the attention residual): Phi3RMSNorm (post_attention_layernorm: variance
in fp32, eps 1e-5, learnt scale), Phi3MLP with its fused gate_up_proj (one Linear 3072 -> 2 x
8192, no bias) split by chunk(2), up * silu(gate), down_proj 8192 -> 3072, then the residual
add; a prefill of batch 2 x 128 prompt tokens (an LLM block: two wide GEMMs around a norm and a
gated activation, unlike Llama's separate gate and up projections)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

HIDDEN, INTERMEDIATE, EPS = 3072, 8192, 1e-5
BATCH, LENGTH = 2, 128


class Phi3RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class Phi3MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_up_proj = nn.Linear(HIDDEN, 2 * INTERMEDIATE, bias=False)
        self.down_proj = nn.Linear(INTERMEDIATE, HIDDEN, bias=False)
        self.activation_fn = F.silu

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        up_states = self.gate_up_proj(hidden_states)
        gate, up_states = up_states.chunk(2, dim=-1)
        up_states = up_states * self.activation_fn(gate)
        return self.down_proj(up_states)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.post_attention_layernorm = Phi3RMSNorm(HIDDEN, eps=EPS)
        self.mlp = Phi3MLP()
        with torch.no_grad():  # a trained norm's scale
            self.post_attention_layernorm.weight.uniform_(0.5, 1.5)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


def get_inputs():
    return [torch.randn(BATCH, LENGTH, HIDDEN)]


def get_init_inputs():
    return []
