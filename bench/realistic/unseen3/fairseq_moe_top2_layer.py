"""The mixture-of-experts FFN layer of a fairseq MoE transformer language model (fairseq's
MOELayer with Top2Gate, GShard's top-2 routing, as Artetxe et al.'s MoE LMs use it) at the
base width d_model 768, expert FFN 3072 (fc1, GELU, fc2), 8 experts on one GPU: the gate's
Linear 768 -> 8 and softmax, the top expert by argmax and the second by argmax over the rest
(--moe-second-expert-policy all, no Gumbel noise), positions in each expert's buffer by cumsum,
the evaluation capacity ceil(0.25 * tokens) = 512 with overflowing tokens dropped, the two gate
values renormalised, the (tokens, experts, capacity) combine weights built with one_hot/scatter
and bmm, the GShard einsums written as fairseq writes them (dispatch mm (E*C, S) x (S, M),
per-expert FFN over its 512 slots, combine mm (S, E*C) x (E*C, M)); logging metadata and the
auxiliary loss left out; batch 4 x 512 tokens (an LLM MoE block with static-shape routing)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

D_MODEL, FFN, EXPERTS, EVAL_CAPACITY_FRACTION = 768, 3072, 8, 0.25
BATCH, LENGTH = 4, 512


def one_hot(indices, num_classes, unsqueeze_indices=False):
    if unsqueeze_indices:
        indices = indices.unsqueeze(-1)
    output = torch.zeros(indices.shape[:-1] + (num_classes,), device=indices.device, dtype=indices.dtype)
    output.scatter_(len(output.shape) - 1, indices, 1)
    return output


def top2gating(logits, capacity_fraction):
    gates = F.softmax(logits, dim=1)
    num_tokens, num_experts = gates.shape
    capacity = math.ceil(capacity_fraction * num_tokens)  # eval mode

    indices1_s = torch.argmax(gates, dim=1, keepdim=True)
    mask1 = one_hot(indices1_s, num_experts)
    logits_w_noise = logits  # second_expert_policy "all"
    logits_except1 = logits_w_noise.masked_fill(mask1.bool(), float("-inf"))
    indices2_s = torch.argmax(logits_except1, dim=1, keepdim=True)
    mask2 = one_hot(indices2_s, num_experts)

    locations1 = torch.cumsum(mask1, dim=0) - 1
    locations2 = torch.cumsum(mask2, dim=0) - 1
    locations2 += torch.sum(mask1, dim=0, keepdim=True)

    mask1 = mask1 * torch.lt(locations1, capacity)
    mask2 = mask2 * torch.lt(locations2, capacity)

    gates1_s = (gates * mask1).sum(dim=1)
    gates2_s = (gates * mask2).sum(dim=1)
    denom_s = gates1_s + gates2_s
    denom_s = torch.clamp(denom_s, min=torch.finfo(denom_s.dtype).eps)
    gates1_s /= denom_s
    gates2_s /= denom_s

    locations1_s = torch.sum(locations1 * mask1, dim=1)
    locations2_s = torch.sum(locations2 * mask2, dim=1)
    gates1 = gates1_s.unsqueeze(-1) * mask1.to(gates1_s.dtype)  # einsum("s,se->se")
    gates2 = gates2_s.unsqueeze(-1) * mask2.to(gates2_s.dtype)
    locations1_sc = one_hot(locations1_s, num_classes=capacity, unsqueeze_indices=True)
    locations2_sc = one_hot(locations2_s, num_classes=capacity, unsqueeze_indices=True)
    combine1_sec = torch.bmm(
        gates1.unsqueeze(-1), locations1_sc.to(gates1.dtype).unsqueeze(1)
    )  # "se,sc->sec"
    combine2_sec = torch.bmm(gates2.unsqueeze(-1), locations2_sc.to(gates2.dtype).unsqueeze(1))
    combine_weights = combine1_sec + combine2_sec
    dispatch_mask = combine_weights.bool()
    return combine_weights, dispatch_mask


class FeedForwardNetwork(nn.Module):
    def __init__(self, embed_dim, ffn_dim):
        super().__init__()
        self.fc1 = nn.Linear(embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, embed_dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.wg = nn.Linear(D_MODEL, EXPERTS, bias=False)  # Top2Gate
        self.experts = nn.ModuleList([FeedForwardNetwork(D_MODEL, FFN) for _ in range(EXPERTS)])
        self.all2all_size = 1  # one GPU: the all-to-all is the identity
        self.num_local_experts = EXPERTS

    def forward(self, input):
        d_model = input.shape[2]
        reshaped_input = input.reshape(-1, d_model)
        combine_weights, dispatch_mask = top2gating(self.wg(reshaped_input), EVAL_CAPACITY_FRACTION)
        dispatch_mask = dispatch_mask.to(input.dtype).permute(1, 2, 0)  # S,E,C -> E,C,S
        E, C, S = dispatch_mask.size()
        M = reshaped_input.size(1)
        dispatched_input = torch.mm(dispatch_mask.view(E * C, S), reshaped_input)  # einsum("sec,sm->ecm")
        dispatched_input = dispatched_input.reshape(self.all2all_size, self.num_local_experts, -1, d_model)
        chunks = dispatched_input.chunk(self.num_local_experts, dim=1)
        expert_outputs = []
        for chunk, expert in zip(chunks, self.experts, strict=False):
            expert_outputs += [expert(chunk)]
        expert_output = torch.cat(expert_outputs, dim=1)
        expert_output = expert_output.reshape(self.all2all_size * self.num_local_experts, -1, d_model)
        combined_output = combine_weights.view(S, E * C).mm(
            expert_output.view(E * C, M)
        )  # einsum("sec,ecm->sm")
        return combined_output.reshape(input.shape)


def get_inputs():
    return [torch.randn(BATCH, LENGTH, D_MODEL)]


def get_init_inputs():
    return []
