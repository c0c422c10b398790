"""Conv2d (stride 1, padding k // 2) + bias + ReLU as a Triton implicit GEMM, NCHW fp32.

The convolution is the matrix product out[m, co] = sum_k patch[m, k] * w[co, k], with
m = (n, oh, ow) running over output pixels, co over output channels and
k = (ci, kh, kw) over the C_in * KH * KW filter taps. The patch matrix is never built:
each (BLOCK_M, BLOCK_K) tile is gathered from x on the fly, with a mask for taps that
fall in the zero padding. The weight (C_out, C_in, KH, KW) is read as the (C_out, K)
matrix it already is in memory. tl.dot uses input_precision="ieee" (strict fp32).

Memory traffic: x is read about KH * KW times per output-channel tile, mostly from
L1/L2; the weight, C_out * K floats, stays in L2; the output is written once, after the
bias and ReLU. Pixel, channel and K tails are masked, so any size works.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv2d_bias_relu_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    batch, C_in, H, W, C_out,
    stride_xn, stride_xc, stride_xh, stride_xw,
    stride_yn, stride_yc, stride_yh, stride_yw,
    KH: tl.constexpr, KW: tl.constexpr, PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    HW = H * W
    M = batch * HW
    K = C_in * KH * KW

    # Output pixel coordinates of this tile's rows.
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < M
    n_idx = offs_m // HW
    hw = offs_m % HW
    oh = hw // W
    ow = hw % W
    x_base = n_idx.to(tl.int64) * stride_xn

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < C_out
    offs_k = tl.arange(0, BLOCK_K)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        mask_k = k < K
        ci = k // (KH * KW)
        tap = k % (KH * KW)
        kh = tap // KW
        kw = tap % KW
        ih = oh[:, None] + kh[None, :] - PAD
        iw = ow[:, None] + kw[None, :] - PAD
        in_bounds = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        x_ptrs = x_ptr + x_base[:, None] + ci[None, :] * stride_xc + ih * stride_xh + iw * stride_xw
        patch = tl.load(x_ptrs, mask=mask_m[:, None] & mask_k[None, :] & in_bounds, other=0.0)
        # Weight tile (BLOCK_K, BLOCK_N): element (k, co) of the (C_out, K) weight matrix.
        w_tile = tl.load(
            w_ptr + offs_n[None, :] * K + k[:, None], mask=mask_k[:, None] & mask_n[None, :], other=0.0
        )
        acc = tl.dot(patch, w_tile, acc, input_precision="ieee")

    bias = tl.load(b_ptr + offs_n, mask=mask_n, other=0.0)
    acc = tl.maximum(acc + bias[None, :], 0.0)
    y_ptrs = (
        y_ptr
        + (n_idx.to(tl.int64) * stride_yn + oh * stride_yh + ow * stride_yw)[:, None]
        + offs_n[None, :] * stride_yc
    )
    tl.store(y_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])


def conv2d_bias_relu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    if x.dtype != torch.float32 or weight.dtype != torch.float32:
        raise TypeError("conv2d_bias_relu expects fp32 tensors")
    batch, C_in, H, W = x.shape
    C_out, C_in_w, KH, KW = weight.shape
    if C_in_w != C_in or KH != KW or KH % 2 != 1:
        raise ValueError(f"unsupported weight {tuple(weight.shape)} for input {tuple(x.shape)}")
    x = x.contiguous()
    weight = weight.contiguous()
    y = torch.empty((batch, C_out, H, W), device=x.device, dtype=torch.float32)
    BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 32
    grid = (triton.cdiv(batch * H * W, BLOCK_M), triton.cdiv(C_out, BLOCK_N))
    conv2d_bias_relu_kernel[grid](
        x, weight, bias.contiguous(), y,
        batch, C_in, H, W, C_out,
        x.stride(0), x.stride(1), x.stride(2), x.stride(3),
        y.stride(0), y.stride(1), y.stride(2), y.stride(3),
        KH=KH, KW=KW, PAD=KH // 2,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        num_warps=4, num_stages=3,
    )
    return y


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return conv2d_bias_relu(x, self.conv.weight, self.conv.bias)
