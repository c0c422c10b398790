"""FourCastNet AFNO block: FFT token mixing with a block-diagonal complex MLP (global weather model).

Model / block
    FourCastNet (Pathak et al. 2022, NVIDIA), the 0.25-degree global weather
    forecasting backbone: one `Block` of the AFNO network.  LayerNorm ->
    Adaptive Fourier Neural Operator filter: rfft2 over the 90 x 180 token
    grid (ortho norm), a 2-layer complex-valued MLP that is block-diagonal over
    8 channel blocks of 96 (written as real/imag einsums into zero-initialised
    buffers, only for the kept modes), softshrink sparsification,
    view_as_complex, irfft2, + its input -> double skip -> LayerNorm ->
    768 -> 3072 GELU MLP -> residual.

Upstream code followed
    github.com/NVlabs/FourCastNet, `networks/afnonet.py` (AFNO2D, Block, Mlp,
    and AFNONet which builds the blocks with norm_layer=partial(nn.LayerNorm,
    eps=1e-6), num_blocks=8, sparsity_threshold=0.01,
    hard_thresholding_fraction=1.0, double_skip=True).  As upstream, with
    hard_thresholding_fraction 1 the kept-mode slice covers all 90 rows but
    only the first 46 of the 91 rfft columns (kept_modes = H//2 + 1 = 46); the
    rest of the spectrum is zeroed.

Use case and shapes
    Operational FourCastNet inference on the ERA5 0.25-degree grid (720 x 1440,
    20 variables), patch 8 -> a 90 x 180 token grid, embed_dim 768, batch 1
    (one 6-hour autoregressive step of a deterministic forecast).

    input : float32 (1, 90, 180, 768) (tokens after patch embedding, NHWC)
    output: float32 (1, 90, 180, 768)

Cost (rough)
    Parameters 5.02 M (20.1 MB fp32).
    FLOPs: MLP 2*2*16200*768*3072 = 153 GFLOP; AFNO einsums 8 x 2*4140 modes *
    8 blocks * 96*96 = 4.9 GFLOP; rfft2/irfft2 over 768 channels ~0.3 GFLOP;
    ~158 GFLOP (~4 ms at 40 TFLOP/s).  Bytes: the token grid is 50 MB, the
    hidden MLP activation 199 MB, the spectral buffers (o1/o2 real/imag,
    stack, softshrink, complex) ~26 MB each: ~1.5 GB moved.

Departures:
    - One block of 12; no patch embedding / positional embedding / head.
    - AFNO2D weights: upstream uses 0.02 * randn for w1, b1, w2, b2; with that
      scale the spectral MLP output is ~0.02 rms and softshrink(0.01) zeroes
      most of it, so the filter is nearly the identity (x + bias).  Here w1 and
      w2 are randn / sqrt(block_size) (= 0.102), and w2 is centred over its
      input index (otherwise the positive mean of the ReLU'd first layer is
      mapped to the same value on all 4140 kept modes and irfft2 turns it into
      a ~100x spike at grid point (0, 0)); b1, b2 keep 0.02 * randn.
    - Linear layers keep the upstream trunc_normal(std 0.02) / zero-bias init
      except the biases, set to U(-0.02, 0.02); LayerNorm weight/bias are
      1 + U(-0.2, 0.2) / U(-0.1, 0.1) (1 / 0 upstream) so they are not no-ops.
    - DropPath / Dropout (0 at inference) are identities and omitted.
"""

from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

EMBED_DIM = 768
MLP_RATIO = 4.0
NUM_BLOCKS = 8
SPARSITY_THRESHOLD = 0.01
HARD_THRESHOLDING_FRACTION = 1.0

BATCH = 1
H_TOKENS = 720 // 8
W_TOKENS = 1440 // 8


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU, drop=0.0):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.fc2 = nn.Linear(hidden_features, out_features)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.fc2(x)
        return x


class AFNO2D(nn.Module):
    def __init__(
        self,
        hidden_size,
        num_blocks=8,
        sparsity_threshold=0.01,
        hard_thresholding_fraction=1,
        hidden_size_factor=1,
    ):
        super().__init__()
        assert hidden_size % num_blocks == 0, (
            f"hidden_size {hidden_size} should be divisble by num_blocks {num_blocks}"
        )

        self.hidden_size = hidden_size
        self.sparsity_threshold = sparsity_threshold
        self.num_blocks = num_blocks
        self.block_size = self.hidden_size // self.num_blocks
        self.hard_thresholding_fraction = hard_thresholding_fraction
        self.hidden_size_factor = hidden_size_factor
        self.scale = 0.02

        self.w1 = nn.Parameter(
            self.scale
            * torch.randn(2, self.num_blocks, self.block_size, self.block_size * self.hidden_size_factor)
        )
        self.b1 = nn.Parameter(
            self.scale * torch.randn(2, self.num_blocks, self.block_size * self.hidden_size_factor)
        )
        self.w2 = nn.Parameter(
            self.scale
            * torch.randn(2, self.num_blocks, self.block_size * self.hidden_size_factor, self.block_size)
        )
        self.b2 = nn.Parameter(self.scale * torch.randn(2, self.num_blocks, self.block_size))

    def forward(self, x):
        bias = x

        dtype = x.dtype
        x = x.float()
        B, H, W, C = x.shape

        x = torch.fft.rfft2(x, dim=(1, 2), norm="ortho")
        x = x.reshape(B, H, W // 2 + 1, self.num_blocks, self.block_size)

        o1_real = torch.zeros(
            [B, H, W // 2 + 1, self.num_blocks, self.block_size * self.hidden_size_factor], device=x.device
        )
        o1_imag = torch.zeros(
            [B, H, W // 2 + 1, self.num_blocks, self.block_size * self.hidden_size_factor], device=x.device
        )
        o2_real = torch.zeros(x.shape, device=x.device)
        o2_imag = torch.zeros(x.shape, device=x.device)

        total_modes = H // 2 + 1
        kept_modes = int(total_modes * self.hard_thresholding_fraction)

        o1_real[:, total_modes - kept_modes : total_modes + kept_modes, :kept_modes] = F.relu(
            torch.einsum(
                "...bi,bio->...bo",
                x[:, total_modes - kept_modes : total_modes + kept_modes, :kept_modes].real,
                self.w1[0],
            )
            - torch.einsum(
                "...bi,bio->...bo",
                x[:, total_modes - kept_modes : total_modes + kept_modes, :kept_modes].imag,
                self.w1[1],
            )
            + self.b1[0]
        )

        o1_imag[:, total_modes - kept_modes : total_modes + kept_modes, :kept_modes] = F.relu(
            torch.einsum(
                "...bi,bio->...bo",
                x[:, total_modes - kept_modes : total_modes + kept_modes, :kept_modes].imag,
                self.w1[0],
            )
            + torch.einsum(
                "...bi,bio->...bo",
                x[:, total_modes - kept_modes : total_modes + kept_modes, :kept_modes].real,
                self.w1[1],
            )
            + self.b1[1]
        )

        o2_real[:, total_modes - kept_modes : total_modes + kept_modes, :kept_modes] = (
            torch.einsum(
                "...bi,bio->...bo",
                o1_real[:, total_modes - kept_modes : total_modes + kept_modes, :kept_modes],
                self.w2[0],
            )
            - torch.einsum(
                "...bi,bio->...bo",
                o1_imag[:, total_modes - kept_modes : total_modes + kept_modes, :kept_modes],
                self.w2[1],
            )
            + self.b2[0]
        )

        o2_imag[:, total_modes - kept_modes : total_modes + kept_modes, :kept_modes] = (
            torch.einsum(
                "...bi,bio->...bo",
                o1_imag[:, total_modes - kept_modes : total_modes + kept_modes, :kept_modes],
                self.w2[0],
            )
            + torch.einsum(
                "...bi,bio->...bo",
                o1_real[:, total_modes - kept_modes : total_modes + kept_modes, :kept_modes],
                self.w2[1],
            )
            + self.b2[1]
        )

        x = torch.stack([o2_real, o2_imag], dim=-1)
        x = F.softshrink(x, lambd=self.sparsity_threshold)
        x = torch.view_as_complex(x)
        x = x.reshape(B, H, W // 2 + 1, C)
        x = torch.fft.irfft2(x, s=(H, W), dim=(1, 2), norm="ortho")
        x = x.type(dtype)

        return x + bias


class Block(nn.Module):
    def __init__(
        self,
        dim,
        mlp_ratio=4.0,
        drop=0.0,
        drop_path=0.0,
        act_layer=nn.GELU,
        norm_layer=nn.LayerNorm,
        double_skip=True,
        num_blocks=8,
        sparsity_threshold=0.01,
        hard_thresholding_fraction=1.0,
    ):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.filter = AFNO2D(dim, num_blocks, sparsity_threshold, hard_thresholding_fraction)
        self.norm2 = norm_layer(dim)
        mlp_hidden_dim = int(dim * mlp_ratio)
        self.mlp = Mlp(in_features=dim, hidden_features=mlp_hidden_dim, act_layer=act_layer, drop=drop)
        self.double_skip = double_skip

    def forward(self, x):
        residual = x
        x = self.norm1(x)
        x = self.filter(x)

        if self.double_skip:
            x = x + residual
            residual = x

        x = self.norm2(x)
        x = self.mlp(x)
        x = x + residual
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        norm_layer = partial(nn.LayerNorm, eps=1e-6)
        self.block = Block(
            dim=EMBED_DIM,
            mlp_ratio=MLP_RATIO,
            norm_layer=norm_layer,
            num_blocks=NUM_BLOCKS,
            sparsity_threshold=SPARSITY_THRESHOLD,
            hard_thresholding_fraction=HARD_THRESHOLDING_FRACTION,
        )
        with torch.no_grad():
            # AFNONet._init_weights (trunc_normal std .02 for Linear, LayerNorm 1/0), then departures
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.trunc_normal_(m.weight, std=0.02)
                    m.bias.uniform_(-0.02, 0.02)
                elif isinstance(m, nn.LayerNorm):
                    m.weight.fill_(1.0).add_(torch.empty_like(m.weight).uniform_(-0.2, 0.2))
                    m.bias.uniform_(-0.1, 0.1)
            f = self.block.filter
            f.w1.normal_(0.0, f.block_size**-0.5)
            f.w2.normal_(0.0, f.block_size**-0.5)
            # zero-mean over the input index: the mean of the ReLU'd first layer would otherwise map to the
            # same value on every kept mode, i.e. a large spike at grid point (0, 0) after irfft2
            f.w2.sub_(f.w2.mean(dim=-2, keepdim=True))
        self.eval()

    def forward(self, x):
        return self.block(x)


def get_inputs():
    return [torch.randn(BATCH, H_TOKENS, W_TOKENS, EMBED_DIM, dtype=torch.float32)]


def get_init_inputs():
    return []
