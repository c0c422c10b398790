"""Where 3xTF32's accuracy goes on Hopper's tensor cores (GPU): the same split operands
(kforge.tools.gemm.tf32x3's split, laid out as A' = [A_big | A_big | A_small] and
W' = [W_big | W_small | W_big], every part exactly TF32) multiplied several ways, each against
float64, with its time:

- ``cublas tf32``: one cuBLAS TF32 GEMM over K' = 3K (torch, TF32 allowed for the call);
- ``triton acc-in-dot``: a Triton TF32 GEMM over K' whose running sum stays in the tensor
  cores' accumulator, ``acc = tl.dot(a, b, acc)``;
- ``triton 3-dot block``: per K block the three products from zero, then ``acc += part`` in
  fp32 outside the tensor cores (a block's sum is short; the running sum rounds to nearest);
- ``kforge presplit``: kforge.tools.gemm.tf32x3.matmul, the 3-dot block kernel on [big | small]
  operands, the activation's split timed with it (the weight's cached, as in a model);
- ``triton tf32x3``: ``tl.dot(..., input_precision="tf32x3")`` on the unsplit operands;
- ``cublas fp32``: strict fp32 (SIMT), the reference class.

Inputs ``rand`` (all products positive: a rounding bias adds up with K) and ``randn``.

    python bench/bench_tf32_accumulate.py
"""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl
from common import header, print_table
from kforge.examples import ROOT as EXAMPLES

sys.path.insert(0, str(EXAMPLES / "candidates"))
import matmul_tf32x3_triton as mt  # noqa: E402
from bench_tf32x3 import timed  # noqa: E402
from kforge.tools.gemm import tf32x3  # noqa: E402

SHAPES = [
    ("ViT fc1", 6304, 768, 3072),
    ("GPT-2 mlp c_proj", 4096, 3072, 768),
    ("Llama down", 2048, 8192, 2048),
]


@triton.jit
def presplit_kernel(
    a_ptr, w_ptr, c_ptr, M, N, KP, MODE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    """C (M, N) from A' (M, 3KP) and W' (N, 3KP), both row-major. MODE 0: one TF32 GEMM over
    3KP accumulated in the dot; MODE 1: per block of KP, three dots from zero, then acc +=."""
    pid = tl.program_id(0)
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    size_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_rows = a_ptr + offs_m[:, None].to(tl.int64) * (3 * KP) + offs_k[None, :]
    w_cols = w_ptr + offs_n[None, :].to(tl.int64) * (3 * KP) + offs_k[:, None]
    mask_a, mask_w = offs_m[:, None] < M, offs_n[None, :] < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if MODE == 0:
        for k in range(0, 3 * KP, BLOCK_K):
            a = tl.load(a_rows + k, mask=mask_a, other=0.0)
            w = tl.load(w_cols + k, mask=mask_w, other=0.0)
            acc = tl.dot(a, w, acc, input_precision="tf32")
    else:
        for k in range(0, KP, BLOCK_K):
            a_big = tl.load(a_rows + k, mask=mask_a, other=0.0)
            a_small = tl.load(a_rows + 2 * KP + k, mask=mask_a, other=0.0)
            w_big = tl.load(w_cols + k, mask=mask_w, other=0.0)
            w_small = tl.load(w_cols + KP + k, mask=mask_w, other=0.0)
            part = tl.dot(a_small, w_big, input_precision="tf32")
            part = tl.dot(a_big, w_small, part, input_precision="tf32")
            part = tl.dot(a_big, w_big, part, input_precision="tf32")
            acc += part
    c = c_ptr + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    tl.store(c, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


CONFIGS = [
    triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_warps=w, num_stages=s)
    for m, n, k, w, s in [(128, 128, 32, 8, 3), (128, 256, 32, 8, 3), (256, 128, 32, 8, 3), (128, 128, 64, 8, 3),
                          (128, 256, 64, 8, 2), (128, 128, 32, 4, 4), (64, 128, 32, 4, 4)]
]  # fmt: skip
tuned = triton.autotune(configs=CONFIGS, key=["M", "N", "KP", "MODE"])(presplit_kernel)


def presplit(a3: torch.Tensor, w3: torch.Tensor, mode: int) -> torch.Tensor:
    m, n, kp = a3.shape[0], w3.shape[0], a3.shape[1] // 3
    c = torch.empty((m, n), device=a3.device)
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)  # noqa: E731
    tuned[grid](a3, w3, c, m, n, kp, MODE=mode)
    return c


def in_registers(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    mt.PRESPLIT = False
    out = mt.matmul_tf32x3(a, b)
    mt.PRESPLIT = True
    return out


def cublas_tf32(a3: torch.Tensor, w3: torch.Tensor) -> torch.Tensor:
    torch.backends.cuda.matmul.allow_tf32 = True
    out = a3 @ w3.t()
    torch.backends.cuda.matmul.allow_tf32 = False
    return out


def main() -> None:
    print(header("python bench/bench_tf32_accumulate.py"), flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for name, m, k, n in SHAPES:
        for dist in ("rand", "randn"):
            torch.manual_seed(0)
            make = torch.rand if dist == "rand" else torch.randn
            a, w = make(m, k, device="cuda"), make(n, k, device="cuda")
            a2, w2 = tf32x3.split(a.unsqueeze(0))[0], tf32x3.split(w.unsqueeze(0))[0]
            kp = a2.shape[1] // 2
            a3 = torch.cat([a2[:, :kp], a2[:, :kp], a2[:, kp:]], 1)  # [big | big | small]
            w3 = torch.cat([w2[:, :kp], w2[:, kp:], w2[:, :kp]], 1)  # [big | small | big]
            weight = torch.nn.Parameter(w, requires_grad=False)
            ref = a.double() @ w.double().t()
            ways = {
                "cublas tf32": lambda a3=a3, w3=w3: cublas_tf32(a3, w3),
                "triton acc-in-dot": lambda a3=a3, w3=w3: presplit(a3, w3, 0),
                "triton 3-dot block": lambda a3=a3, w3=w3: presplit(a3, w3, 1),
                "kforge presplit": lambda a=a, wt=weight.t(): tf32x3.matmul(
                    a.unsqueeze(0), wt.unsqueeze(0), wt
                )[0],
                "triton tf32x3": lambda a=a, w=w: in_registers(a, w.t()),
                "cublas fp32": lambda a=a, w=w: a @ w.t(),
            }
            flops = 2.0 * m * n * k
            for way, fn in ways.items():
                err = float((fn().double() - ref).norm() / ref.norm())
                ms = timed(fn)
                rows.append([name, dist, way, f"{err:.1e}", f"{ms:.3f}", f"{flops / ms / 1e9:.0f}"])
                print(" | ".join(rows[-1]), flush=True)
            del ref
            torch.cuda.empty_cache()
    print_table("3xTF32 accumulation: error vs float64, time (ms), fp32-equivalent TFLOP/s",
                ["shape", "inputs", "way", "rel err (norm)", "ms", "TFLOP/s"], rows)  # fmt: skip


if __name__ == "__main__":
    main()
