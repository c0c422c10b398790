"""NAFNet (width 64, TLC "Local" variant) block at full resolution on a 720p frame.

Model / block
    NAFNet-width64 image deblurring network (Chen et al., "Simple Baselines for
    Image Restoration", ECCV 2022) as evaluated on GoPro with Test-time Local
    Converter (NAFNetLocal): one `NAFBlock` of the first encoder level (64
    channels, full resolution).  LayerNorm2d (channel LayerNorm written by hand)
    -> 1x1 conv 64->128 -> depthwise 3x3 conv -> SimpleGate (chunk + multiply)
    -> Simplified Channel Attention whose global average pool is replaced by
    TLC's local average pool (integral image: two cumsums, four shifted slices,
    replicate padding) -> 1x1 conv -> beta-scaled residual -> LayerNorm2d ->
    1x1 conv 64->128 -> SimpleGate -> 1x1 conv -> gamma-scaled residual.

Upstream code followed
    github.com/megvii-research/NAFNet: `basicsr/models/archs/NAFNet_arch.py`
    (SimpleGate, NAFBlock, NAFNetLocal), `basicsr/models/archs/arch_util.py`
    (LayerNormFunction, LayerNorm2d) and `basicsr/models/archs/local_arch.py`
    (AvgPool2d, replace_layers, Local_Base.convert).  As in NAFNetLocal, the
    AdaptiveAvgPool2d(1) of SCA is replaced by AvgPool2d(base_size=(384, 384),
    train_size=(1, 3, 256, 256), fast_imp=False), and the kernel size is fixed
    by one forward at the training size (256x256 at this level -> kernel 384,
    which at 720x1280 is a local 384x384 box filter).

Use case and shapes
    GoPro deblurring test images are 1280x720 and NAFNet is run on the full
    frame (no tiling), batch 1; the first encoder level works on
    (1, 64, 720, 1280) features.

    input : float32 (1, 64, 720, 1280) (white noise + a smooth random field
            upsampled from 9x16, so local statistics vary over the frame)
    output: float32 (1, 64, 720, 1280)

Cost (rough)
    Parameters 30.8 k.
    FLOPs: 1x1 convs 2*921600*(64*128 + 64*64 + 64*128 + 64*64) = 45 GFLOP,
    depthwise 3x3 2*921600*128*9 = 2.1 GFLOP, integral-image pool ~0.5 GFLOP:
    ~48 GFLOP (1.2 ms at 40 TFLOP/s).  Memory bound: one 64-channel map is
    236 MB, a 128-channel map 472 MB; the hand-written LayerNorm2d alone makes
    ~8 elementwise/reduction passes; ~10 GB moved (~4 ms at 2.5 TB/s).

Departures:
    - A single NAFBlock instead of the full U-Net (28+1+... blocks).
    - LayerNormFunction.backward uses ctx.saved_tensors (saved_variables is
      gone from current PyTorch); backward is never run here.
    - Kernel size of the local pool is set by running the pool once on a
      (1, 64, 256, 256) tensor in __init__ (upstream runs the whole network on a
      (1, 3, 256, 256) image in Local_Base.convert; the resulting kernel is the
      same).
    - Weights (upstream trains from PyTorch's default conv init): conv
      weights are N(0, 1/fan_in) and the SCA conv bias U(0.5, 1.5), because
      with the default init the gated features are ~0.14 rms and the channel
      attention is a near-constant scale (local vs. global pooling would then
      differ by < 0.02 at the output); conv biases keep the default init;
      beta and gamma (zeros at init upstream, which makes the block the
      identity) are set to U(0.2, 0.6); LayerNorm2d weight/bias set to
      1 + U(-0.2, 0.2) / U(-0.1, 0.1).
    - Dropout (drop_out_rate = 0) is nn.Identity upstream and is omitted.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

WIDTH = 64
BATCH = 1
H = 720
W = 1280
TRAIN_SIZE = (1, 3, 256, 256)
BASE_SIZE = (int(TRAIN_SIZE[-2] * 1.5), int(TRAIN_SIZE[-1] * 1.5))


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        ctx.eps = eps
        N, C, H, W = x.size()
        mu = x.mean(1, keepdim=True)
        var = (x - mu).pow(2).mean(1, keepdim=True)
        y = (x - mu) / (var + eps).sqrt()
        ctx.save_for_backward(y, var, weight)
        y = weight.view(1, C, 1, 1) * y + bias.view(1, C, 1, 1)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        eps = ctx.eps

        N, C, H, W = grad_output.size()
        y, var, weight = ctx.saved_tensors
        g = grad_output * weight.view(1, C, 1, 1)
        mean_g = g.mean(dim=1, keepdim=True)

        mean_gy = (g * y).mean(dim=1, keepdim=True)
        gx = 1.0 / torch.sqrt(var + eps) * (g - y * mean_gy - mean_g)
        return (
            gx,
            (grad_output * y).sum(dim=3).sum(dim=2).sum(dim=0),
            grad_output.sum(dim=3).sum(dim=2).sum(dim=0),
            None,
        )


class LayerNorm2d(nn.Module):
    def __init__(self, channels, eps=1e-6):
        super().__init__()
        self.register_parameter("weight", nn.Parameter(torch.ones(channels)))
        self.register_parameter("bias", nn.Parameter(torch.zeros(channels)))
        self.eps = eps

    def forward(self, x):
        return LayerNormFunction.apply(x, self.weight, self.bias, self.eps)


class AvgPool2d(nn.Module):
    def __init__(self, kernel_size=None, base_size=None, auto_pad=True, fast_imp=False, train_size=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.base_size = base_size
        self.auto_pad = auto_pad

        # only used for fast implementation
        self.fast_imp = fast_imp
        self.rs = [5, 4, 3, 2, 1]
        self.max_r1 = self.rs[0]
        self.max_r2 = self.rs[0]
        self.train_size = train_size

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, base_size={self.base_size}, stride={self.kernel_size}, fast_imp={self.fast_imp}"

    def forward(self, x):
        if self.kernel_size is None and self.base_size:
            train_size = self.train_size
            if isinstance(self.base_size, int):
                self.base_size = (self.base_size, self.base_size)
            self.kernel_size = list(self.base_size)
            self.kernel_size[0] = x.shape[2] * self.base_size[0] // train_size[-2]
            self.kernel_size[1] = x.shape[3] * self.base_size[1] // train_size[-1]

            # only used for fast implementation
            self.max_r1 = max(1, self.rs[0] * x.shape[2] // train_size[-2])
            self.max_r2 = max(1, self.rs[0] * x.shape[3] // train_size[-1])

        if self.kernel_size[0] >= x.size(-2) and self.kernel_size[1] >= x.size(-1):
            return F.adaptive_avg_pool2d(x, 1)

        if self.fast_imp:  # Non-equivalent implementation but faster
            h, w = x.shape[2:]
            if self.kernel_size[0] >= h and self.kernel_size[1] >= w:
                out = F.adaptive_avg_pool2d(x, 1)
            else:
                r1 = [r for r in self.rs if h % r == 0][0]
                r2 = [r for r in self.rs if w % r == 0][0]
                # reduction_constraint
                r1 = min(self.max_r1, r1)
                r2 = min(self.max_r2, r2)
                s = x[:, :, ::r1, ::r2].cumsum(dim=-1).cumsum(dim=-2)
                n, c, h, w = s.shape
                k1, k2 = min(h - 1, self.kernel_size[0] // r1), min(w - 1, self.kernel_size[1] // r2)
                out = (s[:, :, :-k1, :-k2] - s[:, :, :-k1, k2:] - s[:, :, k1:, :-k2] + s[:, :, k1:, k2:]) / (
                    k1 * k2
                )
                out = torch.nn.functional.interpolate(out, scale_factor=(r1, r2))
        else:
            n, c, h, w = x.shape
            s = x.cumsum(dim=-1).cumsum_(dim=-2)
            s = torch.nn.functional.pad(s, (1, 0, 1, 0))  # pad 0 for convenience
            k1, k2 = min(h, self.kernel_size[0]), min(w, self.kernel_size[1])
            s1, s2, s3, s4 = s[:, :, :-k1, :-k2], s[:, :, :-k1, k2:], s[:, :, k1:, :-k2], s[:, :, k1:, k2:]
            out = s4 + s1 - s2 - s3
            out = out / (k1 * k2)

        if self.auto_pad:
            n, c, h, w = x.shape
            _h, _w = out.shape[2:]
            pad2d = ((w - _w) // 2, (w - _w + 1) // 2, (h - _h) // 2, (h - _h + 1) // 2)
            out = torch.nn.functional.pad(out, pad2d, mode="replicate")

        return out


class SimpleGate(nn.Module):
    def forward(self, x):
        x1, x2 = x.chunk(2, dim=1)
        return x1 * x2


class NAFBlock(nn.Module):
    def __init__(self, c, DW_Expand=2, FFN_Expand=2, drop_out_rate=0.0):
        super().__init__()
        dw_channel = c * DW_Expand
        self.conv1 = nn.Conv2d(
            in_channels=c, out_channels=dw_channel, kernel_size=1, padding=0, stride=1, groups=1, bias=True
        )
        self.conv2 = nn.Conv2d(
            in_channels=dw_channel,
            out_channels=dw_channel,
            kernel_size=3,
            padding=1,
            stride=1,
            groups=dw_channel,
            bias=True,
        )
        self.conv3 = nn.Conv2d(
            in_channels=dw_channel // 2,
            out_channels=c,
            kernel_size=1,
            padding=0,
            stride=1,
            groups=1,
            bias=True,
        )

        # Simplified Channel Attention
        self.sca = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(
                in_channels=dw_channel // 2,
                out_channels=dw_channel // 2,
                kernel_size=1,
                padding=0,
                stride=1,
                groups=1,
                bias=True,
            ),
        )

        # SimpleGate
        self.sg = SimpleGate()

        ffn_channel = FFN_Expand * c
        self.conv4 = nn.Conv2d(
            in_channels=c, out_channels=ffn_channel, kernel_size=1, padding=0, stride=1, groups=1, bias=True
        )
        self.conv5 = nn.Conv2d(
            in_channels=ffn_channel // 2,
            out_channels=c,
            kernel_size=1,
            padding=0,
            stride=1,
            groups=1,
            bias=True,
        )

        self.norm1 = LayerNorm2d(c)
        self.norm2 = LayerNorm2d(c)

        self.beta = nn.Parameter(torch.zeros((1, c, 1, 1)), requires_grad=True)
        self.gamma = nn.Parameter(torch.zeros((1, c, 1, 1)), requires_grad=True)

    def forward(self, inp):
        x = inp

        x = self.norm1(x)

        x = self.conv1(x)
        x = self.conv2(x)
        x = self.sg(x)
        x = x * self.sca(x)
        x = self.conv3(x)

        y = inp + x * self.beta

        x = self.conv4(self.norm2(y))
        x = self.sg(x)
        x = self.conv5(x)

        return y + x * self.gamma


def replace_layers(model, base_size, train_size, fast_imp, **kwargs):
    for n, m in model.named_children():
        if len(list(m.children())) > 0:
            ## compound module, go inside it
            replace_layers(m, base_size, train_size, fast_imp, **kwargs)

        if isinstance(m, nn.AdaptiveAvgPool2d):
            pool = AvgPool2d(base_size=base_size, fast_imp=fast_imp, train_size=train_size)
            assert m.output_size == 1
            setattr(model, n, pool)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = NAFBlock(WIDTH)
        with torch.no_grad():
            b = self.block
            # departure: unit-gain convs (see docstring)
            for c in (b.conv1, b.conv2, b.conv3, b.conv4, b.conv5, b.sca[1]):
                c.weight.normal_(0.0, c.weight[0].numel() ** -0.5)
            b.sca[1].bias.uniform_(0.5, 1.5)
            b.beta.uniform_(0.2, 0.6)
            b.gamma.uniform_(0.2, 0.6)
            for n in (self.block.norm1, self.block.norm2):
                n.weight.add_(torch.empty_like(n.weight).uniform_(-0.2, 0.2))
                n.bias.uniform_(-0.1, 0.1)
        # NAFNetLocal: Local_Base.convert(base_size, train_size, fast_imp=False)
        replace_layers(self, BASE_SIZE, train_size=TRAIN_SIZE, fast_imp=False)
        with torch.no_grad():
            # the convert pass sees the level-1 feature of a 256x256 training crop
            self.block.sca[0](torch.zeros(1, WIDTH, TRAIN_SIZE[-2], TRAIN_SIZE[-1]))
        self.eval()

    def forward(self, x):
        return self.block(x)


def get_inputs():
    # feature maps of natural images are spatially correlated: white noise plus a smooth random field, so the
    # local (TLC) pooling sees statistics that vary across the frame
    x = torch.randn(BATCH, WIDTH, H, W, dtype=torch.float32)
    low = torch.randn(BATCH, WIDTH, H // 80, W // 80, dtype=torch.float32)
    x = x + 1.5 * F.interpolate(low, size=(H, W), mode="bilinear", align_corners=False)
    return [x]


def get_init_inputs():
    return []
