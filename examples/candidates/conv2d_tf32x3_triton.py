"""Conv2d + bias + ReLU at fp32 accuracy on tensor cores: a Triton implicit GEMM with 3xTF32.

The convolution is the matrix product out[m, co] = sum_k patch[m, k] * w[co, k], with
m = (n, oh, ow) over output pixels, co over output channels and k = (ci, kh, kw) over
the filter taps. The patch matrix is never built: the address of patch[m, k] is
row[m] + col[k], with row[m] = n*sxn + ih0*sxh + iw0*sxw fixed per output pixel and
col[k] = ci*sxc + kh*dil*sxh + kw*dil*sxw per tap, so each (BLOCK_M, BLOCK_K) tile is
a gather from x in its own NCHW layout (consecutive output pixels read consecutive
addresses), masked where a tap falls in the zero padding. The weight is read as the
(C_out, K) matrix it already is.

``tl.dot(..., input_precision="tf32x3")`` sums three TF32 tensor-core products per fp32
product (see matmul_tf32x3_triton.py): fp32 accuracy at tensor-core rates, where
cuDNN's strict-fp32 convolutions run on the FP32 CUDA cores. Bias and ReLU are applied
to the accumulator before the single store. Any stride, padding and dilation; groups = 1.
Tile sizes are autotuned per shape on the GPU.
"""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


def _configs():
    shapes = [(128, 128, 32, 8, 3), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (256, 64, 32, 8, 3),
              (64, 64, 32, 4, 4), (128, 32, 32, 4, 4), (128, 128, 16, 8, 4)]
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_warps=w, num_stages=s)
            for m, n, k, w, s in shapes]


@triton.jit
def conv2d_tf32x3_kernel(
    x_ptr, w_ptr, bias_ptr, y_ptr,
    P, OH, OW, C_out, K, H, W,
    sxn, sxc, sxh, sxw,
    swo, swk,
    syn, syc, syh, syw,
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
    KH: tl.constexpr, KW: tl.constexpr, HAS_BIAS: tl.constexpr, RELU: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # Grouped tile order: GROUP_M pixel tiles reuse the same weight tiles while in L2.
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(P, BLOCK_M)
    num_pid_n = tl.cdiv(C_out, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # output pixels (n, oh, ow)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # output channels
    mask_m = offs_m < P
    mask_n = offs_n < C_out
    n = offs_m // (OH * OW)
    rest = offs_m % (OH * OW)
    oh = rest // OW
    ow = rest % OW
    ih0 = oh * stride_h - pad_h
    iw0 = ow * stride_w - pad_w
    row = n.to(tl.int64) * sxn + ih0 * sxh + iw0 * sxw

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)  # filter taps (ci, kh, kw)
        mask_k = k < K
        ci = k // (KH * KW)
        tap = k % (KH * KW)
        kh = tap // KW
        kw = tap % KW
        ih = ih0[:, None] + (kh * dil_h)[None, :]
        iw = iw0[:, None] + (kw * dil_w)[None, :]
        inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        col = ci * sxc + kh * dil_h * sxh + kw * dil_w * sxw
        a = tl.load(x_ptr + row[:, None] + col[None, :], mask=mask_m[:, None] & mask_k[None, :] & inside, other=0.0)
        b = tl.load(w_ptr + offs_n[None, :] * swo + k[:, None] * swk, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="tf32x3")

    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0)[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0)
    out = n.to(tl.int64) * syn + oh * syh + ow * syw
    tl.store(y_ptr + out[:, None] + offs_n[None, :].to(tl.int64) * syc, acc, mask=mask_m[:, None] & mask_n[None, :])


# Autotuned on the GPU; the CPU interpreter (TRITON_INTERPRET=1, used in CI) has no
# benchmarker, so it runs one small fixed tile.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
_tuned = None if INTERPRETED else triton.autotune(configs=_configs(), key=["P", "C_out", "K"])(conv2d_tf32x3_kernel)
_FIXED = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 8}


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv2d_tf32x3(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                  stride=1, padding=0, dilation=1, relu: bool = False) -> torch.Tensor:
    """F.conv2d(x, weight, bias, stride, padding, dilation) (then ReLU) for fp32 NCHW x, groups = 1."""
    if x.dtype != torch.float32 or weight.dtype != torch.float32:
        raise TypeError("conv2d_tf32x3 expects fp32 tensors")
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    batch, C_in, H, W = x.shape
    C_out, C_w, KH, KW = weight.shape
    if C_w != C_in:
        raise ValueError(f"weight {tuple(weight.shape)} does not match {C_in} input channels (groups = 1 only)")
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    w2 = weight.reshape(C_out, C_in * KH * KW)  # a view for a contiguous weight
    y = torch.empty((batch, C_out, OH, OW), device=x.device, dtype=torch.float32)
    P, K = batch * OH * OW, C_in * KH * KW
    grid = lambda meta: (triton.cdiv(P, meta["BLOCK_M"]) * triton.cdiv(C_out, meta["BLOCK_N"]),)  # noqa: E731
    kernel, fixed = (conv2d_tf32x3_kernel, _FIXED) if _tuned is None else (_tuned, {})
    kernel[grid](
        x, w2, bias.contiguous() if bias is not None else y, y,
        P, OH, OW, C_out, K, H, W,
        x.stride(0), x.stride(1), x.stride(2), x.stride(3),
        w2.stride(0), w2.stride(1),
        y.stride(0), y.stride(1), y.stride(2), y.stride(3),
        sh, sw, ph, pw, dh, dw,
        KH=KH, KW=KW, HAS_BIAS=bias is not None, RELU=relu, **fixed,
    )
    return y


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv
        return conv2d_tf32x3(x, c.weight, c.bias, c.stride, c.padding, c.dilation, relu=True)
