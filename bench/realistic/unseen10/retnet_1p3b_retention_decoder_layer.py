"""RetNet-1.3B (Retentive Network, Sun et al. 2023) -- one decoder layer with multi-scale retention, parallel form.

Model / block: RetNetDecoderLayer (pre-norm):
    x = x + MultiScaleRetention(RMSNorm(x))
    x = x + GLU-FFN(RMSNorm(x))
MultiScaleRetention (parallel form): q/k/v/g projections (no bias), xPos-style "theta shift" rotation of q and k
(rotate_every_two on even/odd lanes), k scaled by key_dim^-0.5, retention matrix (q k^T) * D where D is the
per-head causal exponential-decay mask (decay_h = log(1 - 2^(-5-h)), rows normalised by sqrt of their sum),
rows normalised by clamp(sum|.|, 1, 5e4), times v, per-head RMS "group norm" (no affine), swish(g) gate, out_proj.
FFN: GLU, fc2(gelu(fc1(x)) * gate(x)), no bias.
Upstream code followed: microsoft/torchscale torchscale/architecture/retnet.py (RetNetRelPos, RetNetDecoderLayer)
and torchscale/component/multiscale_retention.py (MultiScaleRetention, theta_shift, rotate_every_two),
component/gate_linear_unit.py (GLU), component/rms_norm.py (RMSNorm).
Config: the paper's RetNet-1.3B: embed 2048, 8 retention heads (key head dim 256), value dim 2*embed = 4096
(value head dim 512), FFN 4096, RMSNorm eps 1e-6.
Use case: LM prompt processing in the parallel (training/prefill) representation.
Shapes: x [batch=2, seq=2048, 2048] fp32 -> [2, 2048, 2048].
Rough FLOPs: projections q,k 2*2*4096tok*2048^2 = 69 GFLOP, v,g,out 3*2*4096*2048*4096 = 206 GFLOP,
retention q k^T 2*2*8*2048^2*256 = 34 GFLOP and (qk) v 2*2*8*2048^2*512 = 69 GFLOP, GLU FFN 3*2*4096*2048*4096 =
206 GFLOP -> ~585 GFLOP (~12 ms at 50 TFLOP/s). The decay mask / qk_mat are [8, 2048, 2048] / [2, 8, 2048, 2048].

Departures:
- One decoder layer only; the relative-position tensors (sin, cos, decay mask) are built inside forward
  (torchscale builds them once per forward at the decoder level) -- same computation.
- Init: all projection weights xavier_uniform with gain 1 (torchscale uses gain 2^-2.5 for q/k/v/g and 2^-1 for
  out_proj, which makes the retention branch ~30x smaller than the residual); FFN keeps nn.Linear default init;
  RMSNorm weights 1 + 0.1 * noise instead of ones.
- No dropout, no MultiwayWrapper (single modality), no deepnorm / subln (the RetNet defaults).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

EMBED_DIM = 2048
VALUE_DIM = 4096
NUM_HEADS = 8
FFN_DIM = 4096
LN_EPS = 1e-6
BATCH = 2
SEQ = 2048


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6, elementwise_affine=True):
        super().__init__()
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if self.elementwise_affine:
            self.weight = nn.Parameter(torch.ones(dim))
        else:
            self.register_parameter("weight", None)

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        if self.weight is not None:
            output = output * self.weight
        return output


def rotate_every_two(x):
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)  # in einsum notation: rearrange(x, '... d j -> ... (d j)')


def theta_shift(x, sin, cos):
    return (x * cos) + (rotate_every_two(x) * sin)


class RetNetRelPos(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        angle = 1.0 / (10000 ** torch.linspace(0, 1, embed_dim // num_heads // 2))
        angle = angle.unsqueeze(-1).repeat(1, 2).flatten()
        decay = torch.log(1 - 2 ** (-5 - torch.arange(num_heads, dtype=torch.float)))
        self.register_buffer("angle", angle)
        self.register_buffer("decay", decay)

    def forward(self, slen):
        index = torch.arange(slen).to(self.decay)
        sin = torch.sin(index[:, None] * self.angle[None, :])
        cos = torch.cos(index[:, None] * self.angle[None, :])
        mask = torch.tril(torch.ones(slen, slen).to(self.decay))
        mask = torch.masked_fill(index[:, None] - index[None, :], ~mask.bool(), float("inf"))
        mask = torch.exp(mask * self.decay[:, None, None])
        mask = torch.nan_to_num(mask)
        mask = mask / mask.sum(dim=-1, keepdim=True).sqrt()
        retention_rel_pos = ((sin, cos), mask)
        return retention_rel_pos


class MultiScaleRetention(nn.Module):
    def __init__(self, embed_dim, value_dim, num_heads):
        super().__init__()
        self.factor = value_dim // embed_dim
        self.embed_dim = embed_dim
        self.value_dim = value_dim
        self.num_heads = num_heads
        self.head_dim = self.value_dim // num_heads
        self.key_dim = self.embed_dim // num_heads
        self.scaling = self.key_dim**-0.5
        self.gate_fn = F.silu  # "swish"

        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, value_dim, bias=False)
        self.g_proj = nn.Linear(embed_dim, value_dim, bias=False)
        self.out_proj = nn.Linear(value_dim, embed_dim, bias=False)
        self.group_norm = RMSNorm(self.head_dim, eps=LN_EPS, elementwise_affine=False)
        self.reset_parameters()

    def reset_parameters(self):
        # departure: gain 1 everywhere (upstream: 2 ** -2.5 for q/k/v/g, 2 ** -1 for out_proj)
        for lin in (self.q_proj, self.k_proj, self.v_proj, self.g_proj, self.out_proj):
            nn.init.xavier_uniform_(lin.weight, gain=1.0)

    def parallel_forward(self, qr, kr, v, mask):
        bsz, tgt_len, embed_dim = v.size()
        vr = v.view(bsz, tgt_len, self.num_heads, self.head_dim).transpose(1, 2)
        qk_mat = qr @ kr.transpose(-1, -2)  # bsz * m * tgt_len * tgt_len
        qk_mat = qk_mat * mask
        # invariant after normalization
        qk_mat = qk_mat / qk_mat.detach().abs().sum(dim=-1, keepdim=True).clamp(min=1, max=5e4)
        output = torch.matmul(qk_mat, vr)
        output = output.transpose(1, 2)
        return output

    def forward(self, x, rel_pos):
        bsz, tgt_len, _ = x.size()
        (sin, cos), inner_mask = rel_pos

        q = self.q_proj(x)
        k = self.k_proj(x)
        v = self.v_proj(x)
        g = self.g_proj(x)

        k *= self.scaling
        q = q.view(bsz, tgt_len, self.num_heads, self.key_dim).transpose(1, 2)
        k = k.view(bsz, tgt_len, self.num_heads, self.key_dim).transpose(1, 2)

        qr = theta_shift(q, sin, cos)
        kr = theta_shift(k, sin, cos)

        output = self.parallel_forward(qr, kr, v, inner_mask)
        output = self.group_norm(output).reshape(bsz, tgt_len, self.head_dim * self.num_heads)
        output = self.gate_fn(g) * output
        output = self.out_proj(output)
        return output


class GLU(nn.Module):
    def __init__(self, embed_dim, ffn_dim):
        super().__init__()
        self.activation_fn = F.gelu
        self.fc1 = nn.Linear(embed_dim, ffn_dim, bias=False)
        self.fc2 = nn.Linear(ffn_dim, embed_dim, bias=False)
        self.gate = nn.Linear(embed_dim, ffn_dim, bias=False)

    def forward(self, x):
        x_shape = x.shape
        x = x.reshape(-1, x.size(-1))
        g = self.gate(x)
        x = self.fc1(x)
        x = self.activation_fn(x.float()).type_as(x) * g
        x = self.fc2(x)
        x = x.view(x_shape)
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.retnet_rel_pos = RetNetRelPos(EMBED_DIM, NUM_HEADS)
        self.retention = MultiScaleRetention(EMBED_DIM, VALUE_DIM, NUM_HEADS)
        self.retention_layer_norm = RMSNorm(EMBED_DIM, eps=LN_EPS)
        self.ffn = GLU(EMBED_DIM, FFN_DIM)
        self.final_layer_norm = RMSNorm(EMBED_DIM, eps=LN_EPS)
        with torch.no_grad():
            for norm in (self.retention_layer_norm, self.final_layer_norm):
                norm.weight.copy_(1.0 + 0.1 * torch.randn_like(norm.weight))
        self.eval()

    def forward(self, x):
        slen = x.size(1)
        retention_rel_pos = self.retnet_rel_pos(slen)

        residual = x
        x = self.retention_layer_norm(x)
        x = self.retention(x, rel_pos=retention_rel_pos)
        x = residual + x

        residual = x
        x = self.final_layer_norm(x)
        x = self.ffn(x)
        x = residual + x
        return x


def get_inputs():
    return [torch.randn(BATCH, SEQ, EMBED_DIM, dtype=torch.float32)]


def get_init_inputs():
    return []
