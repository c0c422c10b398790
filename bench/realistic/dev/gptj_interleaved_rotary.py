"""GPT-J-6B's rotary embedding as transformers writes it (modeling_gptj.py): sinusoidal positions
gathered by position id, split into sin and cos, each repeat_interleave'd per pair, and
rotate_every_two (columns 2j and 2j + 1 turned as a pair: stack((-x[..., 1::2], x[..., ::2]),
-1).flatten(-2)) applied to the first 64 (rotary_dim) of each head's 256 dims of the queries and
keys, the rest passed through, in GPT-J's (batch, positions, heads, head dim) layout before its
permute; 16 heads, batch 4 x 2048 positions (an LLM block's memory-bound elementwise part)."""

import torch
import torch.nn as nn

HEADS, HEAD_DIM, ROTARY_DIM, POSITIONS = 16, 256, 64, 2048


def create_sinusoidal_positions(num_pos: int, dim: int) -> torch.Tensor:
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))
    sinusoid_inp = torch.einsum(
        "i , j -> i j", torch.arange(num_pos, dtype=torch.int64).float(), inv_freq
    ).float()
    return torch.cat((torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)), dim=1)


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)  # in einsum notation: rearrange(x, '... d j -> ... (d j)')


def apply_rotary_pos_emb(tensor: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    return (tensor * cos) + (rotate_every_two(tensor) * sin)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("embed_positions", create_sinusoidal_positions(POSITIONS, ROTARY_DIM))

    def forward(self, query, key, position_ids):
        sincos = self.embed_positions[position_ids]
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
        k_rot = key[:, :, :, :ROTARY_DIM]
        k_pass = key[:, :, :, ROTARY_DIM:]
        q_rot = query[:, :, :, :ROTARY_DIM]
        q_pass = query[:, :, :, ROTARY_DIM:]
        k_rot = apply_rotary_pos_emb(k_rot, sin, cos)
        q_rot = apply_rotary_pos_emb(q_rot, sin, cos)
        key = torch.cat([k_rot, k_pass], dim=-1)
        query = torch.cat([q_rot, q_pass], dim=-1)
        return query, key


def get_inputs():
    query = torch.randn(4, POSITIONS, HEADS, HEAD_DIM)
    key = torch.randn(4, POSITIONS, HEADS, HEAD_DIM)
    position_ids = torch.arange(POSITIONS).expand(4, POSITIONS)
    return [query, key, position_ids]


def get_init_inputs():
    return []
