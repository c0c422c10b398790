"""Linear + bias + ReLU at fp32 accuracy on tensor cores: a Triton GEMM with 3xTF32.

H100's FP32 CUDA cores peak at 67 TFLOP/s; its TF32 tensor cores at about 495. One TF32
product keeps 10 of fp32's 23 mantissa bits and fails a strict fp32 check. 3xTF32 splits
each operand into a TF32 "big" part and the TF32-rounded remainder, a = a_big + a_small,
and sums three tensor-core products, a_big*b_big + a_big*b_small + a_small*b_big, in an
fp32 accumulator (the dropped a_small*b_small term is 2^-22 relative). The result is as
accurate as an fp32 SIMT GEMM for the K of real layers (the accumulation error, which both
share, dominates), at three tensor-core passes instead of one FP32 pass.
The GEMMs run on kforge's kernel (``kforge.tools.gemm.tf32x3``), which splits the operands
in one memory pass before the GEMM (a weight's split cached on it) and adds each K block's
three products to the fp32 sum outside the tensor cores: on the H200, 1.4-1.6x faster than
this file's own kernel, where ``tl.dot(..., input_precision="tf32x3")`` splits the tiles in
registers, and as accurate. The file's kernel still runs the split-K case below.

``matmul_tf32x3(a, b, bias)`` takes 2-D or batched 3-D operands with any strides,
broadcasts a 2-D ``b`` over a batch, and in the epilogue adds ``bias`` over the last
dimension and applies an activation (ReLU, GELU with erf or tanh) to the accumulator in
registers, which costs no pass over the output. The operands are first laid out as the tensor cores read them fastest (A
M-major, B K-major, K zero-padded to a multiple of 64, aligned rows) when that copy is
cheap beside the GEMM. Tile sizes are autotuned per (M, N, K). A 2-D GEMM with too few
output tiles to fill the GPU and a long K (KernelBench L1 6: 256 x 524288 x 256, four
128x128 tiles) is split along K: the slices run as one batched GEMM (views, no copy) and
are summed in fp32. ``attention_tf32x3`` is kforge's flash attention with 3xTF32 products
(``kforge.tools.gemm.attention``), for the attention between a transformer's GEMMs.
"""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl
from kforge.tools.gemm.attention import sdpa as flash_sdpa_tf32x3
from kforge.tools.gemm.tf32x3 import linear as presplit_linear
from kforge.tools.gemm.tf32x3 import mm as presplit_mm


def _configs():
    shapes = [(128, 128, 32, 8, 3), (128, 256, 32, 8, 3), (256, 128, 32, 8, 3), (128, 64, 32, 4, 4),
              (64, 128, 32, 4, 4), (64, 64, 32, 4, 4), (128, 128, 64, 8, 2), (32, 64, 32, 4, 4)]
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_warps=w, num_stages=s)
            for m, n, k, w, s in shapes]


@triton.jit
def matmul_tf32x3_kernel(
    a_ptr, b_ptr, bias_ptr, c_ptr,
    M, N, K,
    stride_ab, stride_am, stride_ak,
    stride_bb, stride_bk, stride_bn,
    stride_cb, stride_cm, stride_cn,
    HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # Grouped tile order: GROUP_M row-tiles reuse the same B column tiles while in L2.
    pid = tl.program_id(axis=0)
    batch = tl.program_id(axis=1).to(tl.int64)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    a_ptrs = a_ptr + batch * stride_ab + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + batch * stride_bb + offs_k[:, None] * stride_bk + offs_n[None, :].to(tl.int64) * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K, BLOCK_K):  # K is a multiple of every BLOCK_K (padded): no mask
        a = tl.load(a_ptrs, mask=mask_m[:, None], other=0.0)
        b = tl.load(b_ptrs, mask=mask_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0)[None, :]
    if ACT == 1:  # ReLU
        acc = tl.maximum(acc, 0.0)
    elif ACT == 2:  # GELU, erf form (nn.GELU())
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
    elif ACT == 3:  # GELU, tanh form (nn.GELU("tanh")): 0.5 x (1 + tanh u) = x sigmoid(2u)
        u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = acc * tl.sigmoid(2.0 * u)
    elif ACT == 4:  # SiLU (nn.SiLU, F.silu): x sigmoid(x)
        acc = acc * tl.sigmoid(acc)
    c_ptrs = c_ptr + batch * stride_cb + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])


# Autotuned on the GPU; the CPU interpreter (TRITON_INTERPRET=1, used in CI) has no
# benchmarker, so it runs one small fixed tile.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
PRESPLIT = True  # False: this file's own kernel, which splits the tiles in registers
_tuned = None if INTERPRETED else triton.autotune(configs=_configs(), key=["M", "N", "K"])(matmul_tf32x3_kernel)
_FIXED = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 8}
K_ALIGN = 64  # every BLOCK_K divides it: a padded K needs no mask in the loop
COPY_SHARE = 0.15  # an operand is laid out anew only if copying it costs less than this share of the GEMM
SPLIT_TILES = 132  # split K while the 128x128 output tiles (times slices) stay within two waves of this
SPLIT_MIN_K = 16384  # shorter reductions are not split
SPLIT_MIN_SLICE = 1024  # nor sliced below this much K each


def split_k(m: int, n: int, k: int) -> int:
    """K slices for a 2-D (m, k) @ (k, n): 1 unless the output has fewer tiles than one wave
    and K is long; each slice a multiple of K_ALIGN (no padding) and at least SPLIT_MIN_SLICE."""
    tiles = -(-m // 128) * -(-n // 128)
    if tiles >= SPLIT_TILES or k < SPLIT_MIN_K:
        return 1
    slices = 1
    while (tiles * slices * 2 <= 2 * SPLIT_TILES and k % (slices * 2 * K_ALIGN) == 0
           and k // (slices * 2) >= SPLIT_MIN_SLICE):
        slices *= 2
    return slices


def _worth_copying(x: torch.Tensor, flops: float) -> bool:
    """Measured on the H100: the tensor-core layout made the kernel 1.2-1.6x faster, and a
    copy moves 8 bytes per element at about 3 TB/s while the GEMM runs at about 70 TFLOP/s.
    (Batched 128 x 512 x 1024 x 2048: copying B cost more than the layout gained.)"""
    return 8.0 * x.numel() / 3.0e12 < COPY_SHARE * flops / 70e12


def _a_operand(a: torch.Tensor, kp: int) -> torch.Tensor:
    """(batch, M, K) as a view of a buffer stored (batch, kp, M4): M-major, K zero-padded to
    kp, rows 16-byte aligned. The tensor cores read A and B fastest in this layout and B^T
    K-major (on the H100, 1.6x faster than row-major operands); the copy is one memory pass."""
    batch, m, k = a.shape
    m4 = -(-m // 4) * 4
    if kp == k and a.stride(1) == 1 and a.stride(2) == m4:
        return a
    buf = (a.new_zeros if kp != k else a.new_empty)((batch, kp, m4))
    buf[:, :k, :m].copy_(a.transpose(1, 2))
    return buf.transpose(1, 2)[:, :m, :]


def _b_operand(b: torch.Tensor, kp: int) -> torch.Tensor:
    """(batch, K, N) as a view of a buffer stored (batch, N, kp): K-major, K zero-padded."""
    batch, k, n = b.shape
    if kp == k and b.stride(1) == 1 and b.stride(2) == kp:
        return b  # already K-major: an nn.Linear weight read as W^T
    buf = (b.new_zeros if kp != k else b.new_empty)((batch, n, kp))
    buf[:, :, :k].copy_(b.transpose(1, 2))
    return buf.transpose(1, 2)


ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}  # the kernel's ACT


def _activate(c: torch.Tensor, act: str | None) -> torch.Tensor:
    """The epilogue's activation in torch (after a split-K sum)."""
    if act == "relu":
        return torch.relu_(c)
    if act in ("gelu", "gelu_tanh"):
        return torch.nn.functional.gelu(c, approximate="tanh" if act == "gelu_tanh" else "none")
    if act == "silu":
        return torch.nn.functional.silu(c)
    return c


def matmul_tf32x3(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                  relu: bool = False, act: str | None = None) -> torch.Tensor:
    """act(a @ b (+ bias)) for fp32 a of shape (M, K) or (B, M, K), b of (K, N) or (B, K, N);
    ``act`` a key of ACTIVATIONS (``relu=True`` is "relu")."""
    act = "relu" if relu else act
    if act not in ACTIVATIONS:
        raise ValueError(f"unknown activation {act!r}: relu, gelu, gelu_tanh or silu")
    if a.dtype != torch.float32 or b.dtype != torch.float32:
        raise TypeError("matmul_tf32x3 expects fp32 tensors")
    batched = a.dim() == 3
    a3 = a if batched else a.unsqueeze(0)
    b3 = b if b.dim() == 3 else b.unsqueeze(0)
    batch, M, K = a3.shape
    N = b3.shape[2]
    if b3.shape[1] != K or b3.shape[0] not in (1, batch):
        raise ValueError(f"cannot multiply {tuple(a.shape)} by {tuple(b.shape)}")
    slices = split_k(M, N, K) if a.dim() == b.dim() == 2 else 1
    if slices == 1 and PRESPLIT:  # kforge's kernel: the operands split before the GEMM
        return presplit_mm(a, b, bias, act or "")
    if slices > 1:  # slice j of K: A's columns and B's rows j*K/s.. (views), then one fp32 sum
        ks = K // slices
        parts = matmul_tf32x3(a.reshape(M, slices, ks).transpose(0, 1), b.reshape(slices, ks, N))
        c2 = parts.sum(0)
        if bias is not None:
            c2 += bias
        return _activate(c2, act)
    kp = -(-K // K_ALIGN) * K_ALIGN
    flops = 2.0 * batch * M * N * K
    if kp != K or _worth_copying(a3, flops):  # a K that needs padding pads both operands
        a3 = _a_operand(a3, kp)
    if kp != K or _worth_copying(b3, flops):
        b3 = _b_operand(b3, kp)
    c = torch.empty((batch, M, N), device=a.device, dtype=torch.float32)
    if bias is not None:
        bias = bias.contiguous()
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), batch)  # noqa: E731
    kernel, fixed = (matmul_tf32x3_kernel, _FIXED) if _tuned is None else (_tuned, {})
    kernel[grid](
        a3, b3, bias if bias is not None else c, c,
        M, N, kp,
        a3.stride(0), a3.stride(1), a3.stride(2),
        b3.stride(0) if b3.shape[0] > 1 else 0, b3.stride(1), b3.stride(2),
        c.stride(0), c.stride(1), c.stride(2),
        HAS_BIAS=bias is not None, ACT=ACTIVATIONS[act], **fixed,
    )
    return c if batched else c[0]


def linear_tf32x3(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                  act: str | None = None) -> torch.Tensor:
    """act(x @ weight^T (+ bias)) for an nn.Linear weight (N, K): kforge's op, whose split of the
    weight is kept on it, and one node under torch.compile."""
    rows = x.numel() // max(x.shape[-1], 1)
    if PRESPLIT and x.dtype == weight.dtype == torch.float32 and split_k(rows, weight.shape[0], weight.shape[1]) == 1:
        return presplit_linear(x, weight, bias, act or "")
    return matmul_tf32x3(x.reshape(-1, x.shape[-1]), weight.t(), bias, act=act).reshape(*x.shape[:-1], -1)


def attention_tf32x3(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False,
                     scale: float | None = None, bias: torch.Tensor | None = None,
                     window: int = 0, key_bias: torch.Tensor | None = None,
                     rel_h: torch.Tensor | None = None, rel_w: torch.Tensor | None = None) -> torch.Tensor:
    """scaled_dot_product_attention(q, k, v, is_causal=..., scale=...) without dropout, grouped
    query heads allowed, plus optional additive fp32 biases (ALiBi, a padding mask, T5's
    position bias; ``bias + key_bias`` when both are given, each read as it is), with the
    causal mask or without, the causal mask a sliding window of ``window`` keys when that is
    > 0, and decomposed relative positions over a KH x KW key grid (SAM's: ``rel_h`` (..., L, KH)
    and ``rel_w`` (..., L, KW), key j gets rel_h[j // KW] + rel_w[j % KW]): kforge's flash
    attention with 3xTF32 products, one node under torch.compile."""
    return flash_sdpa_tf32x3(q, k, v, bool(is_causal), None if scale is None else float(scale), bias, int(window),
                             key_bias, rel_h, rel_w)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear_tf32x3(x, self.linear.weight, self.linear.bias, act="relu")
