"""Depthwise 2-D convolution (groups = channels, one filter per channel) in Triton, strict fp32.

A depthwise convolution does KH * KW multiply-adds per output: it is bound by memory, not by
arithmetic, yet cuDNN's and PyTorch's fp32 kernels for it run far below the copy bandwidth at
ConvNeXt's 7 x 7 and MobileNet's 3 x 3 (bench/profile_realistic.py). Here one program computes a
tile of (channels x rows x columns) outputs of one image: each of the KH * KW taps is one masked
load of the shifted input tile (the zero padding is the mask), neighbouring taps hit in L1, and
the output is written once with the bias added. The same kernel reads NCHW (a tile runs along a
row) and channels-last (a tile runs along the channels) through the tensor's strides; the
output has the input's memory format, as F.conv2d's has.

The sum is over KH * KW fp32 products in a fixed order (exact operations, fp32 rounding): the
float64 bound of the fp32 class judges it like any candidate (tests/test_depthwise.py).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from .gemm.conv import memory_layout, out_size, pair
from .launch import Tuned, cdiv, eager_or_op


@triton.jit
def depthwise_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    C, H, W, OH, OW,
    sxn, sxc, sxh, sxw, syn, syc, syh, syw,
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
    KH: tl.constexpr, KW: tl.constexpr, HAS_BIAS: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr,
):  # fmt: skip
    """y[n, c, oh, ow] = bias[c] + sum over taps of x[n, c, ih, iw] * w[c, 0, kh, kw]."""
    n = tl.program_id(0).to(tl.int64)
    tiles_w = tl.cdiv(OW, BLOCK_W)
    th, tw = tl.program_id(1) // tiles_w, tl.program_id(1) % tiles_w
    c = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    oh = th * BLOCK_H + tl.arange(0, BLOCK_H)
    ow = tw * BLOCK_W + tl.arange(0, BLOCK_W)
    mask_c = c < C
    c3 = c[:, None, None]
    oh3, ow3 = oh[None, :, None], ow[None, None, :]
    ih0, iw0 = oh3 * stride_h - pad_h, ow3 * stride_w - pad_w
    # The first tap's addresses, once: every tap is then this tile moved by a scalar offset.
    first = x_ptr + n * sxn + c3.to(tl.int64) * sxc + ih0 * sxh + iw0 * sxw
    acc = tl.zeros((BLOCK_C, BLOCK_H, BLOCK_W), dtype=tl.float32)
    for kh in tl.static_range(KH):
        ih = ih0 + kh * dil_h
        rows_ok = (ih >= 0) & (ih < H) & mask_c[:, None, None]  # (BLOCK_C, BLOCK_H, 1)
        for kw in tl.static_range(KW):
            iw = iw0 + kw * dil_w
            inside = rows_ok & ((iw >= 0) & (iw < W))  # one AND per element
            x = tl.load(first + (kh * dil_h * sxh + kw * dil_w * sxw), mask=inside, other=0.0)
            w = tl.load(w_ptr + c * (KH * KW) + (kh * KW + kw), mask=mask_c, other=0.0)
            acc += x * w[:, None, None]
    if HAS_BIAS:
        acc += tl.load(b_ptr + c, mask=mask_c, other=0.0)[:, None, None]
    out = y_ptr + n * syn + c3.to(tl.int64) * syc + oh3 * syh + ow3 * syw
    tl.store(out, acc, mask=mask_c[:, None, None] & (oh3 < OH) & (ow3 < OW))


def _configs() -> list[triton.Config]:
    # (channels, rows, columns, warps): row tiles for NCHW, channel tiles for channels-last
    shapes = [(1, 8, 64, 4), (1, 16, 32, 4), (2, 8, 32, 4), (4, 4, 32, 4), (1, 4, 128, 4),
              (32, 1, 16, 4), (64, 1, 8, 4), (32, 2, 8, 4), (16, 2, 16, 4), (128, 1, 4, 4)]  # fmt: skip
    return [triton.Config({"BLOCK_C": c, "BLOCK_H": h, "BLOCK_W": w}, num_warps=nw) for c, h, w, nw in shapes]


_kernel = Tuned(
    depthwise_kernel,
    _configs(),
    ["C", "H", "W", "OH", "OW", "sxc", "sxw", "stride_h", "KH", "KW"],
    {"BLOCK_C": 4, "BLOCK_H": 8, "BLOCK_W": 8},
)


def _depthwise(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
) -> torch.Tensor:
    if x.dtype != torch.float32 or weight.dtype != torch.float32 or x.dim() != 4:
        raise TypeError(
            "kforge's depthwise convolution takes fp32 NCHW-shaped tensors; call F.conv2d instead"
        )
    if tuple(weight.shape[:2]) != (x.shape[1], 1):
        raise ValueError(
            f"weight {tuple(weight.shape)} is not depthwise for {x.shape[1]} channels: (C, 1, KH, KW) needed"
        )
    shape = out_size(x, weight, stride, padding, dilation)
    layout = memory_layout(x)
    y = torch.empty(shape, device=x.device, dtype=torch.float32, memory_format=layout)
    if y.numel() == 0:
        return y
    w = weight.contiguous()
    batch, c, oh, ow = shape
    kh, kw = weight.shape[2], weight.shape[3]

    def grid(meta: dict[str, Any]) -> tuple[int, int, int]:
        return batch, cdiv(oh, meta["BLOCK_H"]) * cdiv(ow, meta["BLOCK_W"]), cdiv(c, meta["BLOCK_C"])

    key = (
        c,
        x.shape[2],
        x.shape[3],
        oh,
        ow,
        x.stride(1),
        x.stride(3),
        *stride,
        *padding,
        *dilation,
        kh,
        kw,
        bias is not None,
        layout,
    )
    _kernel(
        key, grid,
        x, w, y if bias is None else bias.contiguous(), y,
        c, x.shape[2], x.shape[3], oh, ow,
        *x.stride(), *y.stride(), *stride, *padding, *dilation,
        KH=kh, KW=kw, HAS_BIAS=bias is not None,
    )  # fmt: skip
    return y


def _depthwise_shape(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Any,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
) -> torch.Tensor:
    return x.new_empty(out_size(x, weight, stride, padding, dilation)).contiguous(
        memory_format=memory_layout(x)
    )


depthwise_op, _call = eager_or_op("kforge::depthwise_conv2d", _depthwise, _depthwise_shape)


def depthwise_conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
) -> torch.Tensor:
    """``F.conv2d(x, weight, bias, stride, padding, dilation, groups=C)`` for fp32 x of C
    channels and a (C, 1, KH, KW) weight, zero padding given as numbers."""
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    return _call(x, weight, bias, [sh, sw], [ph, pw], [dh, dw])
