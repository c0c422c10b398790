"""kforge's depthwise convolution (tools/depthwise.py) under Triton's interpreter: it matches a
float64 convolution for 7 x 7, 3 x 3 and 5 x 5 filters, strides, padding and dilation, channel
and pixel counts that are not a multiple of the tile, with and without a bias, NCHW and
channels-last inputs (the output in the input's format); bad arguments get a clear error. On
the GPU: the error of fp32 at ConvNeXt's and MobileNet's layers."""

from __future__ import annotations

import pytest

PRELUDE = """
import torch
import torch.nn.functional as F
from kforge.tools.depthwise import depthwise_conv2d
torch.manual_seed(0)
def rel(y, ref):
    err = float((y.double() - ref).norm() / ref.norm())
    return err if err == err else float("inf")  # a NaN must not vanish in max()
"""


def test_the_kernel_matches_float64_for_every_geometry_and_layout(interpreted):
    code = """
worst, layouts = 0.0, set()
for n, c, h, w, k, s, p, d, bias in [(2, 3, 9, 11, 7, 1, 3, 1, True), (1, 5, 10, 7, 3, 2, 1, 1, True),
                                     (2, 4, 12, 12, 5, 1, 4, 2, False), (1, 3, 6, 5, 3, 1, 0, 1, True)]:
    x, wt = torch.randn(n, c, h, w), torch.randn(c, 1, k, k)
    b = torch.randn(c) if bias else None
    ref = F.conv2d(x.double(), wt.double(), None if b is None else b.double(), s, p, d, groups=c)
    for inp in (x, x.contiguous(memory_format=torch.channels_last)):
        y = depthwise_conv2d(inp, wt, b, s, p, d)
        assert y.shape == ref.shape, (y.shape, ref.shape)
        layouts.add((inp.is_contiguous(), y.is_contiguous(), y.is_contiguous(memory_format=torch.channels_last)))
        worst = max(worst, rel(y, ref), key=lambda v: (v != v, v))  # a NaN wins
errors = []
for bad in (lambda: depthwise_conv2d(x.double(), wt), lambda: depthwise_conv2d(x[:, :2], wt),
            lambda: depthwise_conv2d(x, torch.randn(c, 2, 3, 3))):
    try:
        bad()
    except (TypeError, ValueError) as e:
        errors.append(type(e).__name__)
print(worst, sorted(layouts), ",".join(errors))
"""
    worst, layouts = interpreted(PRELUDE + code).split(" ", 1)
    assert float(worst) < 1e-6, worst
    assert layouts == "[(False, False, True), (True, True, False)] TypeError,ValueError,ValueError"


@pytest.mark.gpu
def test_on_the_gpu_the_kernel_keeps_fp32s_error_at_convnext_and_mobilenet_layers():
    """ConvNeXt-T's 7 x 7 (96 channels, 56 x 56) and MobileNetV2's 3 x 3 (stride 1 and 2), NCHW
    and channels-last: the error against float64 within 2x PyTorch fp32's."""
    import torch
    import torch.nn.functional as F
    from kforge.tools.depthwise import depthwise_conv2d

    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    for c, hw, k, stride in ((96, 56, 7, 1), (144, 56, 3, 1), (144, 56, 3, 2), (960, 7, 3, 1)):
        x = torch.randn(16, c, hw, hw, device="cuda")
        w = torch.randn(c, 1, k, k, device="cuda") / k
        b = torch.randn(c, device="cuda")
        want = F.conv2d(x.double(), w.double(), b.double(), stride, k // 2, groups=c)
        base = float((F.conv2d(x, w, b, stride, k // 2, groups=c).double() - want).norm() / want.norm())
        for inp in (x, x.contiguous(memory_format=torch.channels_last)):
            y = depthwise_conv2d(inp, w, b, stride, k // 2)
            assert y.is_contiguous(memory_format=torch.channels_last) == (inp is not x)
            err = float((y.double() - want).norm() / want.norm())
            assert err <= 2 * base + 1e-7, (c, k, stride, err, base)
