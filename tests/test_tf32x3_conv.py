"""kforge's 3xTF32 NHWC convolution (tools/gemm/conv.py) under Triton's interpreter: it matches a
float64 convolution for strides, padding, dilation, 1x1 and 7x7 filters, channel counts that
are not a multiple of the tile, every epilogue (bias, residual, ReLU, GELU, SiLU), NCHW and
channels-last inputs; its output has the input's memory format; and a weight's cached split is redone when
the weight changes. (A wrong candidate built on it is caught by the judge:
tests/test_embedded_strategies.py.)"""

from __future__ import annotations

import pytest

PRELUDE = """
import torch
import torch.nn.functional as F
from kforge.tools.gemm import conv as c
torch.manual_seed(0)
def rel(y, ref):
    err = float((y.double() - ref).norm() / ref.norm())
    return err if err == err else float("inf")  # a NaN must not vanish in max()
"""


def test_the_kernel_matches_float64_for_every_geometry_and_epilogue(interpreted):
    code = """
acts = {None: lambda y: y, "relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
        "silu": F.silu}
worst, layouts = 0.0, set()
cases = [(2, 20, 9, 11, 24, 3, 1, 1, 1, "relu"), (2, 16, 8, 8, 40, 1, 1, 0, 1, None), (1, 7, 13, 10, 9, 3, 2, 1, 1, "gelu"),
         (2, 5, 12, 12, 6, 3, 1, 2, 2, "gelu_tanh"), (1, 3, 15, 15, 8, 7, 2, 3, 1, "silu"), (2, 16, 9, 9, 8, 1, 2, 0, 1, None)]
for n, ci, h, w, co, k, s, p, d, act in cases:
    x, wt, b = torch.randn(n, ci, h, w), torch.randn(co, ci, k, k), torch.randn(co)
    ref = F.conv2d(x.double(), wt.double(), b.double(), s, p, d)
    res = torch.randn(ref.shape)
    for inp in (x, x.contiguous(memory_format=torch.channels_last)):
        y = c.conv2d(inp, wt, b, s, p, d, act)
        layouts.add((inp.is_contiguous(), y.is_contiguous(), y.is_contiguous(memory_format=torch.channels_last)))
        worst = max(worst, rel(y, acts[act](ref)), key=lambda v: (v != v, v))  # a NaN wins
    y = c.conv2d(x, wt, None, s, p, d, act, res)
    worst = max(worst, rel(y, acts[act](ref - b.double().view(1, -1, 1, 1) + res.double())), key=lambda v: (v != v, v))  # a NaN wins
    y = c.conv2d(x, wt, b, s, p, d, act, res[:1, :, :1, :1])  # a residual that broadcasts
    worst = max(worst, rel(y, acts[act](ref + res[:1, :, :1, :1].double())), key=lambda v: (v != v, v))  # a NaN wins
print(worst, sorted(layouts))
"""
    worst, layouts = interpreted(PRELUDE + code).split(" ", 1)
    assert float(worst) < 1e-6, worst
    assert layouts == "[(False, False, True), (True, True, False)]"  # the input's memory format


def test_a_conv1d_on_the_kernel_matches_float64_and_keeps_a_channels_innermost_layout(interpreted):
    """Conv1d as a one-pixel-high convolution: strides, padding, dilation, the GELU epilogue and
    a residual; an (N, C, L) input gives a contiguous output, a channels-innermost one (Whisper's
    tokens, ``x.transpose(1, 2)`` contiguous) gives that layout back."""
    code = """
acts = {None: lambda y: y, "relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
        "silu": F.silu}
worst, layouts = 0.0, set()
for n, ci, length, co, k, s, p, d, act in [(2, 20, 30, 24, 3, 1, 1, 1, "gelu"), (1, 16, 17, 40, 3, 2, 1, 1, "gelu_tanh"),
                                           (2, 5, 12, 6, 5, 1, 4, 2, "silu"), (1, 8, 9, 8, 1, 1, 0, 1, "relu")]:
    x, wt, b = torch.randn(n, ci, length), torch.randn(co, ci, k), torch.randn(co)
    ref = F.conv1d(x.double(), wt.double(), b.double(), s, p, d)
    for inp in (x, x.transpose(1, 2).contiguous().transpose(1, 2)):
        y = c.conv1d(inp, wt, b, s, p, d, act)
        assert y.shape == ref.shape, (y.shape, ref.shape)
        layouts.add((inp.is_contiguous(), y.is_contiguous(), y.transpose(1, 2).is_contiguous()))
        worst = max(worst, rel(y, acts[act](ref)), key=lambda v: (v != v, v))  # a NaN wins
    res = torch.randn(ref.shape)
    y = c.conv1d(x, wt, b, (s,), (p,), (d,), act, res)
    worst = max(worst, rel(y, acts[act](ref + res.double())), key=lambda v: (v != v, v))
print(worst, sorted(layouts))
"""
    worst, layouts = interpreted(PRELUDE + code).split(" ", 1)
    assert float(worst) < 1e-6, worst
    assert layouts == "[(False, False, True), (True, True, False)]"


def test_a_changed_weight_is_split_again_and_bad_arguments_get_a_clear_error(interpreted):
    code = """
conv = torch.nn.Conv2d(6, 10, 3, padding=1)
x = torch.randn(1, 6, 7, 7)
first = c.conv2d(x, conv.weight, conv.bias, 1, 1)
kept = conv.weight._kforge_conv_split
c.conv2d(x, conv.weight, conv.bias, 1, 1)
reused = conv.weight._kforge_conv_split is kept
with torch.no_grad():
    conv.weight.mul_(-2.0)
again = c.conv2d(x, conv.weight, conv.bias, 1, 1)
errors = []
for bad in (lambda: c.conv2d(x.double(), conv.weight), lambda: c.conv2d(x[:, :5], conv.weight),
            lambda: c.conv2d(x, conv.weight, act="swish")):
    try:
        bad()
    except (TypeError, ValueError) as e:
        errors.append(type(e).__name__)
ref = F.conv2d(x.double(), conv.weight.double(), conv.bias.double(), 1, 1)
print(reused, rel(again, ref) < 1e-6, rel(first, ref) > 0.1, ",".join(errors))
"""
    assert interpreted(PRELUDE + code) == "True True True TypeError,ValueError,ValueError"


@pytest.mark.gpu
def test_on_the_gpu_the_kernel_keeps_fp32s_error_at_resnets_layers():
    """ResNet-50's 3x3 and 1x1 layers at batch 8, channels-last and NCHW, with bias, residual
    and ReLU: the error against float64 within 2x cuDNN fp32's (TF32 off) and the output in
    the input's memory format."""
    import torch
    import torch.nn.functional as F
    from kforge.tools.gemm import conv as c

    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    for ci, hw, co, k, stride in (
        (64, 56, 64, 3, 1),
        (256, 56, 64, 1, 1),
        (128, 56, 128, 3, 2),
        (1024, 14, 256, 1, 1),
    ):
        x = torch.randn(8, ci, hw, hw, device="cuda")
        w = torch.randn(co, ci, k, k, device="cuda") / (ci * k * k) ** 0.5
        b = torch.randn(co, device="cuda")
        ref = F.conv2d(x.double(), w.double(), b.double(), stride, k // 2)
        res = torch.randn(ref.shape, device="cuda")
        want = torch.relu(ref + res.double())
        cudnn = torch.relu(F.conv2d(x, w, b, stride, k // 2) + res)
        base = float((cudnn.double() - want).norm() / want.norm())
        for inp in (x, x.contiguous(memory_format=torch.channels_last)):
            y = c.conv2d(inp, w, b, stride, k // 2, 1, "relu", res)
            assert y.is_contiguous(memory_format=torch.channels_last) == (inp is not x)
            err = float((y.double() - want).norm() / want.norm())
            assert err <= 2 * base + 1e-7, (ci, co, k, err, base)


@pytest.mark.gpu
def test_on_the_gpu_a_conv1d_keeps_fp32s_error_at_whispers_stem():
    """Whisper-small's two stem convolutions (80 -> 768, then 768 -> 768 with stride 2) with
    GELU, from NCL and channels-innermost inputs: the error against float64 within 2x cuDNN
    fp32's, and the layout kept."""
    import torch
    import torch.nn.functional as F
    from kforge.tools.gemm import conv as c

    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    for ci, length, stride in ((80, 3000, 1), (768, 3000, 2)):
        x = torch.randn(4, ci, length, device="cuda")
        w = torch.randn(768, ci, 3, device="cuda") / (ci * 3) ** 0.5
        b = torch.randn(768, device="cuda")
        want = F.gelu(F.conv1d(x.double(), w.double(), b.double(), stride, 1))
        base = float((F.gelu(F.conv1d(x, w, b, stride, 1)).double() - want).norm() / want.norm())
        for inp in (x, x.transpose(1, 2).contiguous().transpose(1, 2)):
            y = c.conv1d(inp, w, b, stride, 1, 1, "gelu")
            assert y.transpose(1, 2).is_contiguous() == (inp is not x)
            err = float((y.double() - want).norm() / want.norm())
            assert err <= 2 * base + 1e-7, (ci, err, base)
