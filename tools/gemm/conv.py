"""fp32 convolutions at fp32 accuracy on tensor cores: a 3xTF32 implicit GEMM over NHWC.

A Conv2d is the product out[m, co] = sum_k patch[m, k] * w[k, co] with m = (n, oh, ow) over
output pixels and k = (kh, kw, ci) over the filter's taps. In channels-last (NHWC) memory a
tap's channels are contiguous, so for one tap the patch tile (BLOCK_M pixels, BLOCK_K channels)
is BLOCK_M contiguous runs of the input, each masked whole where the tap falls in the zero
padding; the K loop walks taps and channel blocks as one flat loop (the pipeliner sees every
iteration). A 1x1 convolution with stride 1 is then a plain GEMM over the activation.

The weight is rearranged once to (K, C_out) and split into TF32 big and small parts, cached on
the tensor (redone when it changes), as tools/gemm/tf32x3.py does for Linear weights; the
input tile is split in registers. Each K block's three TF32 products (small*big, big*small,
big*big) start from zero and are added to the fp32 accumulator outside the tensor cores, which
keeps the error at fp32's (the reasoning and measurements are in tf32x3.py). The NCHW kernel
this replaces (examples/candidates/conv2d_tf32x3_triton.py before 2026-11-26) gathered each
tile element by element and split both operands in registers: 11-24 TFLOP/s at ResNet-50's
shapes, 0.54-1.36x cuDNN fp32 (docs/log/2026-11-26-tf32x3-presplit-and-models.md).

Epilogue, on the accumulator before the one store: bias (an eval-mode BatchNorm folded in by
the caller), a residual added, then ReLU, GELU or SiLU. The output has the input's memory format,
as F.conv2d's has (code after it may ``.view`` it); an NCHW input is converted to NHWC first
(one pass), so a network run in channels-last pays nothing.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..launch import Tuned, cdiv, eager_or_op
from .tf32x3 import ACTIVATIONS, _tf32_round, grouped_tile


@triton.jit
def conv_kernel(
    x_ptr, wb_ptr, ws_ptr, bias_ptr, res_ptr, y_ptr,
    M, OH, OW, H, W, C_in, C_out,
    sxn, sxh, sxw, syn, syc, syh, syw,
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
    KH: tl.constexpr, KW: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, ACT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    """y = act(conv(x) + bias + res) for NHWC x (channel stride 1) and the split weight
    wb + ws, each (KH * KW * C_in, C_out) contiguous; y (and res) at strides sy*."""
    pid_m, pid_n = grouped_tile(
        tl.program_id(0), M, C_out, BLOCK_M, BLOCK_N, GROUP_M
    )  # weight tiles shared in L2
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m, mask_n = offs_m < M, offs_n < C_out
    n = offs_m // (OH * OW)
    rest = offs_m % (OH * OW)
    oh, ow = rest // OW, rest % OW
    ih0 = oh * stride_h - pad_h
    iw0 = ow * stride_w - pad_w
    base = x_ptr + n.to(tl.int64) * sxn
    blocks = tl.cdiv(C_in, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, KH * KW * blocks):
        tap = step // blocks
        c = (step % blocks) * BLOCK_K + offs_k
        ih = ih0 + (tap // KW) * dil_h
        iw = iw0 + (tap % KW) * dil_w
        inside = mask_m & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        rows = base + ih.to(tl.int64) * sxh + iw * sxw
        mask_c = c < C_in
        a = tl.load(rows[:, None] + c[None, :], mask=inside[:, None] & mask_c[None, :], other=0.0)
        w_off = (tap * C_in + c)[:, None].to(tl.int64) * C_out + offs_n[None, :]
        w_mask = mask_c[:, None] & mask_n[None, :]
        w_big = tl.load(wb_ptr + w_off, mask=w_mask, other=0.0)
        w_small = tl.load(ws_ptr + w_off, mask=w_mask, other=0.0)
        a_big = _tf32_round(a)
        a_small = _tf32_round(a - a_big)
        part = tl.dot(a_small, w_big, input_precision="tf32")  # exact TF32 parts: exact products
        part = tl.dot(a_big, w_small, part, input_precision="tf32")
        part = tl.dot(a_big, w_big, part, input_precision="tf32")
        acc += part  # outside the tensor cores: rounds to nearest
    pixel = n.to(tl.int64) * syn + oh * syh + ow * syw
    out = pixel[:, None] + offs_n[None, :].to(tl.int64) * syc
    mask = mask_m[:, None] & mask_n[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0)[None, :]
    if HAS_RES:
        acc += tl.load(res_ptr + out, mask=mask, other=0.0)
    if ACT == 1:
        acc = tl.maximum(acc, 0.0)
    elif ACT == 2:  # GELU, erf form
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
    elif ACT == 3:  # GELU, tanh form
        acc = acc * tl.sigmoid(1.5957691216057308 * (acc + 0.044715 * acc * acc * acc))
    elif ACT == 4:  # SiLU: x sigmoid(x)
        acc = acc * tl.sigmoid(acc)
    tl.store(y_ptr + out, acc, mask=mask)


def _configs() -> list[triton.Config]:
    shapes = [(128, 128, 32, 8, 3), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (128, 128, 16, 8, 4),
              (256, 64, 32, 8, 3), (64, 64, 32, 4, 4), (128, 256, 32, 8, 3), (128, 64, 64, 4, 3)]  # fmt: skip
    return [
        triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_warps=w, num_stages=s)
        for m, n, k, w, s in shapes
    ]


_kernel = Tuned(
    conv_kernel,
    _configs(),
    ["M", "C_out", "C_in", "H", "W", "stride_h", "KH", "KW"],
    {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 8},
)


def _tf32(t: torch.Tensor) -> torch.Tensor:
    """t rounded to TF32 as ``_tf32_round`` does in the kernels (to nearest, ties away)."""
    return (t.view(torch.int32) + 0x1000).bitwise_and(-8192).view(torch.float32)


def weight_split(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(big, small), each (KH * KW * C_in, C_out) contiguous, of a (C_out, C_in, KH, KW)
    weight (or a Conv1d's (C_out, C_in, KW)); cached on the tensor, keyed by its version and
    storage."""
    key = (weight._version, weight.data_ptr(), tuple(weight.shape), weight.stride())
    cached = getattr(weight, "_kforge_conv_split", None)
    if cached is None or cached[0] != key:
        with torch.no_grad():
            taps_first = weight.detach().movedim(1, -1).movedim(0, -1)  # (KH, KW, C_in, C_out)
            k_major = taps_first.reshape(-1, weight.shape[0]).contiguous()
            big = _tf32(k_major)
            cached = (key, big, _tf32(k_major - big))
        weight._kforge_conv_split = cached  # type: ignore[attr-defined]
    return cached[1], cached[2]


def pair(v: Any) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def out_size(x: torch.Tensor, weight: torch.Tensor, stride: Any, padding: Any, dilation: Any) -> list[int]:
    """The output shape of a 2-D convolution, or of a 1-D one as (N, C_out, 1, L_out) with
    [1, s], [0, p], [1, d] for its stride, padding and dilation."""
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    kh, kw = (1, weight.shape[2]) if weight.dim() == 3 else (weight.shape[2], weight.shape[3])
    height, width = (1, x.shape[2]) if x.dim() == 3 else (x.shape[2], x.shape[3])
    oh = (height + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    return [x.shape[0], weight.shape[0], oh, ow]


def memory_layout(x: torch.Tensor) -> torch.memory_format:
    """channels-last when x is laid out so (and not also plainly contiguous), as F.conv2d decides."""
    plain = x.is_contiguous()
    return (
        torch.channels_last
        if x.is_contiguous(memory_format=torch.channels_last) and not plain
        else torch.contiguous_format
    )


def _as_2d(x: torch.Tensor) -> torch.Tensor:
    """A 1-D convolution's (N, C, L) tensor as (N, C, 1, L): channels-last there when its
    channels are its innermost dim (stride 1), as F.conv1d's channels-last output is."""
    return x if x.dim() == 4 else x.unsqueeze(2)


def _check(x: torch.Tensor, weight: torch.Tensor) -> None:
    if (
        x.dtype != torch.float32
        or weight.dtype != torch.float32
        or x.dim() not in (3, 4)
        or weight.dim() != x.dim()
    ):
        raise TypeError("kforge's 3xTF32 convolution takes fp32 NCHW- or NCL-shaped tensors")
    if weight.shape[1] != x.shape[1]:
        raise ValueError(
            f"weight {tuple(weight.shape)} does not match {x.shape[1]} input channels (groups 1)"
        )


def _conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    act: str,
    residual: torch.Tensor | None,
) -> torch.Tensor:
    """F.conv2d (or F.conv1d, for 3-D x and weight) + residual, then act, with stride, padding
    and dilation as [h, w] pairs ([1, s], [0, p], [1, d] for 1-D)."""
    _check(x, weight)
    one_d = x.dim() == 3
    shape = out_size(x, weight, stride, padding, dilation)
    batch, c_out, oh, ow = shape
    x = _as_2d(x)
    c_in, height, width = x.shape[1], x.shape[2], x.shape[3]
    layout = memory_layout(x)
    x = x.contiguous(memory_format=torch.channels_last)  # no copy when it already is
    y = torch.empty(shape, device=x.device, dtype=torch.float32, memory_format=layout)
    if y.numel() == 0:
        return y.squeeze(2) if one_d else y
    res = None if residual is None else _as_2d(residual).expand(shape).contiguous(memory_format=layout)
    w_big, w_small = weight_split(weight)
    m = batch * oh * ow
    kh, kw = (1, weight.shape[2]) if one_d else (weight.shape[2], weight.shape[3])
    grid = lambda meta: (cdiv(m, meta["BLOCK_M"]) * cdiv(c_out, meta["BLOCK_N"]),)  # noqa: E731
    key = (
        m,
        c_out,
        c_in,
        height,
        width,
        *stride,
        *padding,
        *dilation,
        kh,
        kw,
        bias is not None,
        res is not None,
        act,
        layout,
    )
    _kernel(
        key, grid,
        x, w_big, w_small, y if bias is None else bias.contiguous(), y if res is None else res, y,
        m, oh, ow, height, width, c_in, c_out,
        x.stride(0), x.stride(2), x.stride(3), y.stride(0), y.stride(1), y.stride(2), y.stride(3),
        *stride, *padding, *dilation,
        KH=kh, KW=kw, HAS_BIAS=bias is not None, HAS_RES=res is not None, ACT=ACTIVATIONS[act or None],
    )  # fmt: skip
    return y.squeeze(2) if one_d else y


def _conv2d_shape(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Any,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    *_: Any,
) -> torch.Tensor:
    shape = out_size(x, weight, stride, padding, dilation)
    y = x.new_empty(shape).contiguous(memory_format=memory_layout(_as_2d(x)))
    return y.squeeze(2) if x.dim() == 3 else y


conv2d_op, _conv2d_call = eager_or_op("kforge::tf32x3_conv2d", _conv2d, _conv2d_shape)


def conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    act: str | None = None,
    residual: torch.Tensor | None = None,
) -> torch.Tensor:
    """act(F.conv2d(x, weight, bias, stride, padding, dilation) + residual) for fp32 tensors,
    groups 1, zero padding; act None, "relu", "gelu", "gelu_tanh" or "silu". The result has x's
    memory format."""
    if act not in ACTIVATIONS:
        raise ValueError(f"unknown activation {act!r}: relu, gelu, gelu_tanh or silu")
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    return _conv2d_call(x, weight, bias, [sh, sw], [ph, pw], [dh, dw], act or "", residual)


def conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    act: str | None = None,
    residual: torch.Tensor | None = None,
) -> torch.Tensor:
    """act(F.conv1d(x, weight, bias, stride, padding, dilation) + residual) for fp32 (N, C, L)
    tensors on the same kernel, as a convolution over a one-pixel-high image. The result has
    x's layout: channels innermost (``x.transpose(1, 2)`` contiguous) when x's are."""
    one = lambda v: int(v if isinstance(v, int) else v[0])  # noqa: E731
    return conv2d(x, weight, bias, (1, one(stride)), (0, one(padding)), (1, one(dilation)), act, residual)
