"""Qwen1.5-MoE-A2.7B decoder layer's MoE half as transformers writes it in modeling_qwen2_moe.py
(eager path, pre-refactor expert loop): post_attention_layernorm (Qwen2MoeRMSNorm) then
Qwen2MoeSparseMoeBlock and the residual add. The router is a bias-free Linear 2048 -> 60 experts,
softmax in float32, top-4 (norm_topk_prob False, so the 4 weights are not renormalised). Dispatch
is the HF one-hot mask loop: expert_mask = one_hot(selected_experts, 60).permute(2, 1, 0), and for
each expert torch.where() finds its (slot, token) pairs, the tokens are gathered, run through that
expert's SwiGLU MLP (2048 -> 1408 -> 2048), scaled by their routing weight and index_add_-ed into
the output. A shared expert (SwiGLU 2048 -> 5632 -> 2048) runs on every token and is gated by
sigmoid(shared_expert_gate(x)) (Linear 2048 -> 1). Returns the layer output and router logits.
Use case: prefill of a serving batch, 4 prompts x 512 tokens (2048 tokens)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

HIDDEN_SIZE = 2048
NUM_EXPERTS = 60
NUM_EXPERTS_PER_TOK = 4
MOE_INTERMEDIATE_SIZE = 1408
SHARED_EXPERT_INTERMEDIATE_SIZE = 5632
NORM_TOPK_PROB = False
RMS_NORM_EPS = 1e-6
BATCH, SEQ_LEN = 4, 512


class Qwen2MoeRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class Qwen2MoeMLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Qwen2MoeSparseMoeBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_experts = NUM_EXPERTS
        self.top_k = NUM_EXPERTS_PER_TOK
        self.norm_topk_prob = NORM_TOPK_PROB

        # gating
        self.gate = nn.Linear(HIDDEN_SIZE, NUM_EXPERTS, bias=False)
        self.experts = nn.ModuleList(
            [Qwen2MoeMLP(HIDDEN_SIZE, MOE_INTERMEDIATE_SIZE) for _ in range(self.num_experts)]
        )

        self.shared_expert = Qwen2MoeMLP(HIDDEN_SIZE, SHARED_EXPERT_INTERMEDIATE_SIZE)
        self.shared_expert_gate = torch.nn.Linear(HIDDEN_SIZE, 1, bias=False)

    def forward(self, hidden_states: torch.Tensor):
        """ """
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        # router_logits: (batch * sequence_length, n_experts)
        router_logits = self.gate(hidden_states)

        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        if self.norm_topk_prob:
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        # we cast back to the input dtype
        routing_weights = routing_weights.to(hidden_states.dtype)

        final_hidden_states = torch.zeros(
            (batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype, device=hidden_states.device
        )

        # One hot encode the selected experts to create an expert mask
        # this will be used to easily index which expert is going to be sollicitated
        expert_mask = torch.nn.functional.one_hot(selected_experts, num_classes=self.num_experts).permute(
            2, 1, 0
        )

        # Loop over all available experts in the model and perform the computation on each expert
        for expert_idx in range(self.num_experts):
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx])

            # Index the correct hidden states and compute the expert hidden state for
            # the current expert. We need to make sure to multiply the output hidden
            # states by `routing_weights` on the corresponding tokens (top-1 and top-2)
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]

            # However `index_add_` only support torch tensors for indexing so we'll use
            # the `top_x` tensor here.
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))

        shared_expert_output = self.shared_expert(hidden_states)
        shared_expert_output = F.sigmoid(self.shared_expert_gate(hidden_states)) * shared_expert_output

        final_hidden_states = final_hidden_states + shared_expert_output

        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.post_attention_layernorm = Qwen2MoeRMSNorm(HIDDEN_SIZE, eps=RMS_NORM_EPS)
        self.mlp = Qwen2MoeSparseMoeBlock()
        with torch.no_grad():
            # trained-looking norm weight and a peaky trained router (logit std ~2.2 instead of ~0.55,
            # so the top-4 experts carry ~2/3 of the softmax mass rather than 1/6)
            self.post_attention_layernorm.weight.uniform_(0.8, 2.2)
            self.mlp.gate.weight.mul_(4.0)
        self.eval()

    def forward(self, hidden_states):
        # second half of Qwen2MoeDecoderLayer.forward (after self-attention's residual add)
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        if isinstance(hidden_states, tuple):
            hidden_states, router_logits = hidden_states
        else:
            router_logits = None
        hidden_states = residual + hidden_states
        return hidden_states, router_logits


def get_inputs():
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN_SIZE)]


def get_init_inputs():
    return []
