"""FLUX.1 single-stream transformer block (parallel attention + MLP, 2-D/3-axis RoPE).

Model / block
    Black Forest Labs FLUX.1-dev / FLUX.1-schnell rectified-flow transformer,
    one `SingleStreamBlock` (the model has 38 of them after 19 double-stream
    blocks): adaLN modulation from the conditioning vector -> LayerNorm
    (no affine) -> one fused linear producing q, k, v and the MLP input ->
    per-head RMS QK-norm -> 3-axis rotary embedding applied as 2x2 rotation
    matrices -> scaled_dot_product_attention over the joint text+image
    sequence -> tanh-GELU on the MLP stream -> concat -> one fused output
    linear -> gated residual.

Upstream code followed
    github.com/black-forest-labs/flux, `src/flux/modules/layers.py`
    (SingleStreamBlock, Modulation, QKNorm, RMSNorm, EmbedND) and
    `src/flux/math.py` (attention, rope, apply_rope).  The einops rearranges
    are written with view/permute (same layout).

Use case and shapes
    FLUX.1-dev text-to-image at 512x512 with batch 1: the VAE latent is
    64x64x16, packed 2x2 into 32x32 = 1024 image tokens, concatenated after
    512 T5 text tokens (max_sequence_length 512 of FLUX.1-dev) -> 1536 tokens of
    width 3072 (24 heads x 128).  vec is the (1, 3072) timestep+guidance+pooled
    CLIP vector.  pe is the rotary table produced by EmbedND(dim=128,
    theta=10000, axes_dim=[16, 56, 56]) from txt_ids (zeros) and img_ids
    (0, row, col); it is computed once per model call upstream and passed to
    every block, so it is an input here.

    inputs : x float32 (1, 1536, 3072); vec float32 (1, 3072);
             pe float32 (1, 1, 1536, 64, 2, 2)
    output : float32 (1, 1536, 3072)

Cost (rough)
    Parameters 141.6 M (566 MB fp32).
    FLOPs: linear1 2*1536*3072*21504 = 203 GFLOP; linear2 2*1536*15360*3072 =
    145 GFLOP; attention 4*1536^2*3072 = 29 GFLOP; ~377 GFLOP (~9.4 ms at
    40 TFLOP/s).  Bytes: ~0.57 GB weights + ~0.6 GB activations.

Departures:
    - One single-stream block; no double-stream blocks / embedders / final layer.
    - einops rearrange replaced by equivalent view/permute/reshape.
    - `rope` (used only in get_inputs to build pe) computes in float64 like
      upstream and returns float32; the block itself is float32.
    - Weights: upstream loads trained weights.  Here linear1 / linear2 weights
      are N(0, 1/fan_in) (PyTorch's default Linear init has a third of that
      variance and makes the gated branch only ~7% of the residual), biases
      and the modulation Linear keep PyTorch's default init (gate ~0.34 rms);
      the QK RMSNorm scales (1 at init upstream) are set to U(0.5, 1.5) so
      they are not a no-op.
"""

import torch
import torch.nn as nn
from torch import Tensor

HIDDEN = 3072
N_HEADS = 24
MLP_RATIO = 4.0
THETA = 10000
AXES_DIM = (16, 56, 56)

BATCH = 1
TXT_LEN = 512
IMG_H = 32  # 512 px / 8 (VAE) / 2 (2x2 packing)
IMG_W = 32


def rope(pos: Tensor, dim: int, theta: int) -> Tensor:
    assert dim % 2 == 0
    scale = torch.arange(0, dim, 2, dtype=torch.float64, device=pos.device) / dim
    omega = 1.0 / (theta**scale)
    out = torch.einsum("...n,d->...nd", pos, omega)
    out = torch.stack([torch.cos(out), -torch.sin(out), torch.sin(out), torch.cos(out)], dim=-1)
    # rearrange(out, "b n d (i j) -> b n d i j", i=2, j=2)
    out = out.view(*out.shape[:-1], 2, 2)
    return out.float()


def apply_rope(xq: Tensor, xk: Tensor, freqs_cis: Tensor):
    xq_ = xq.float().reshape(*xq.shape[:-1], -1, 1, 2)
    xk_ = xk.float().reshape(*xk.shape[:-1], -1, 1, 2)
    xq_out = freqs_cis[..., 0] * xq_[..., 0] + freqs_cis[..., 1] * xq_[..., 1]
    xk_out = freqs_cis[..., 0] * xk_[..., 0] + freqs_cis[..., 1] * xk_[..., 1]
    return xq_out.reshape(*xq.shape).type_as(xq), xk_out.reshape(*xk.shape).type_as(xk)


def attention(q: Tensor, k: Tensor, v: Tensor, pe: Tensor) -> Tensor:
    q, k = apply_rope(q, k, pe)

    x = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    # rearrange(x, "B H L D -> B L (H D)")
    B, H, L, D = x.shape
    x = x.permute(0, 2, 1, 3).reshape(B, L, H * D)

    return x


class EmbedND(nn.Module):
    def __init__(self, dim: int, theta: int, axes_dim):
        super().__init__()
        self.dim = dim
        self.theta = theta
        self.axes_dim = axes_dim

    def forward(self, ids: Tensor) -> Tensor:
        n_axes = ids.shape[-1]
        emb = torch.cat(
            [rope(ids[..., i], self.axes_dim[i], self.theta) for i in range(n_axes)],
            dim=-3,
        )
        return emb.unsqueeze(1)


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor):
        x_dtype = x.dtype
        x = x.float()
        rrms = torch.rsqrt(torch.mean(x**2, dim=-1, keepdim=True) + 1e-6)
        return (x * rrms).to(dtype=x_dtype) * self.scale


class QKNorm(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.query_norm = RMSNorm(dim)
        self.key_norm = RMSNorm(dim)

    def forward(self, q: Tensor, k: Tensor, v: Tensor):
        q = self.query_norm(q)
        k = self.key_norm(k)
        return q.to(v), k.to(v)


class Modulation(nn.Module):
    def __init__(self, dim: int, double: bool):
        super().__init__()
        self.is_double = double
        self.multiplier = 6 if double else 3
        self.lin = nn.Linear(dim, self.multiplier * dim, bias=True)

    def forward(self, vec: Tensor):
        out = self.lin(nn.functional.silu(vec))[:, None, :].chunk(self.multiplier, dim=-1)
        # ModulationOut(shift, scale, gate)
        return out[:3], (out[3:] if self.is_double else None)


class SingleStreamBlock(nn.Module):
    """
    A DiT block with parallel linear layers as described in
    https://arxiv.org/abs/2302.05442 and adapted modulation interface.
    """

    def __init__(self, hidden_size: int, num_heads: int, mlp_ratio: float = 4.0, qk_scale=None):
        super().__init__()
        self.hidden_dim = hidden_size
        self.num_heads = num_heads
        head_dim = hidden_size // num_heads
        self.scale = qk_scale or head_dim**-0.5

        self.mlp_hidden_dim = int(hidden_size * mlp_ratio)
        # qkv and mlp_in
        self.linear1 = nn.Linear(hidden_size, hidden_size * 3 + self.mlp_hidden_dim)
        # proj and mlp_out
        self.linear2 = nn.Linear(hidden_size + self.mlp_hidden_dim, hidden_size)

        self.norm = QKNorm(head_dim)

        self.hidden_size = hidden_size
        self.pre_norm = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)

        self.mlp_act = nn.GELU(approximate="tanh")
        self.modulation = Modulation(hidden_size, double=False)

    def forward(self, x: Tensor, vec: Tensor, pe: Tensor) -> Tensor:
        (mod_shift, mod_scale, mod_gate), _ = self.modulation(vec)
        x_mod = (1 + mod_scale) * self.pre_norm(x) + mod_shift
        qkv, mlp = torch.split(self.linear1(x_mod), [3 * self.hidden_size, self.mlp_hidden_dim], dim=-1)

        # rearrange(qkv, "B L (K H D) -> K B H L D", K=3, H=self.num_heads)
        B, L, _ = qkv.shape
        q, k, v = qkv.view(B, L, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k = self.norm(q, k, v)

        # compute attention
        attn = attention(q, k, v, pe=pe)
        # compute activation in mlp stream, cat again and run second linear layer
        output = self.linear2(torch.cat((attn, self.mlp_act(mlp)), 2))
        return x + mod_gate * output


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = SingleStreamBlock(HIDDEN, N_HEADS, mlp_ratio=MLP_RATIO)
        with torch.no_grad():
            # departure: unit-variance fused linears (see docstring)
            for lin in (self.block.linear1, self.block.linear2):
                lin.weight.normal_(0.0, lin.in_features**-0.5)
            for n in (self.block.norm.query_norm, self.block.norm.key_norm):
                n.scale.uniform_(0.5, 1.5)
        self.eval()

    def forward(self, x, vec, pe):
        return self.block(x, vec, pe)


def get_inputs():
    x = torch.randn(BATCH, TXT_LEN + IMG_H * IMG_W, HIDDEN, dtype=torch.float32)
    vec = torch.randn(BATCH, HIDDEN, dtype=torch.float32)
    # flux.sampling.prepare: img_ids = (0, row, col), txt_ids = 0; ids = cat(txt_ids, img_ids)
    img_ids = torch.zeros(IMG_H, IMG_W, 3)
    img_ids[..., 1] = img_ids[..., 1] + torch.arange(IMG_H)[:, None]
    img_ids[..., 2] = img_ids[..., 2] + torch.arange(IMG_W)[None, :]
    img_ids = img_ids.reshape(1, IMG_H * IMG_W, 3).repeat(BATCH, 1, 1)
    txt_ids = torch.zeros(BATCH, TXT_LEN, 3)
    ids = torch.cat((txt_ids, img_ids), dim=1)
    pe = EmbedND(dim=HIDDEN // N_HEADS, theta=THETA, axes_dim=list(AXES_DIM))(ids).contiguous()
    return [x, vec, pe]


def get_init_inputs():
    return []
