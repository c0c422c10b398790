"""3xTF32 Triton GEMM vs cuBLAS FP32 at KernelBench's fp32 GEMM shapes (GPU).

For each shape: cuBLAS fp32 (TF32 off, as strict fp32 runs it), the prior kernel
``matmul_tf32x3`` (autotuned) and plain TF32 cuBLAS for scale; times are CUDA-event
medians. Accuracy: ||out - ref64|| / ||ref64|| against a float64 product, and whether the
3xTF32 output passes the strict check (allclose to the fp32 result, atol = rtol = 1e-4).

    python bench/bench_tf32x3.py
"""

from __future__ import annotations

import statistics
import sys

import torch
from common import header, print_table
from kforge.examples import ROOT as EXAMPLES

sys.path.insert(0, str(EXAMPLES / "candidates"))
from matmul_tf32x3_triton import matmul_tf32x3  # noqa: E402

# (name, batch, M, K, N, A transposed, B transposed): KernelBench L1 1-3, 6-10, 16-18,
# the L2 GEMM chains (1024 x 8192 x 8192) and L3 MLP-sized layers.
SHAPES = [
    ("L1 1 square", 0, 4096, 4096, 4096, False, False),
    ("L1 2 standard", 0, 2048, 8192, 4096, False, False),
    ("L1 3 batched", 128, 512, 1024, 2048, False, False),
    ("L1 6 large K", 0, 256, 524288, 256, False, False),
    ("L1 7 small K", 0, 32768, 64, 32768, False, False),
    ("L1 8 irregular", 0, 8205, 2949, 5921, False, False),
    ("L1 9 tall-skinny", 0, 32768, 32, 32768, False, False),
    ("L1 10 3D x 2D", 0, 16 * 1024, 2048, 768, False, False),
    ("L1 16 A^T", 0, 2048, 8192, 4096, True, False),
    ("L1 17 B^T", 0, 2048, 8192, 4096, False, True),
    ("L1 18 A^T B^T", 0, 2048, 8192, 4096, True, True),
    ("L2 gemm 1024x8192x8192", 0, 1024, 8192, 8192, False, True),
    ("L3 MLP 128x16384x32768", 0, 128, 16384, 32768, False, True),
]


def timed(fn, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def operand(batch: int, rows: int, cols: int, transposed: bool) -> torch.Tensor:
    shape = (cols, rows) if transposed else (rows, cols)
    x = torch.rand(*((batch,) if batch else ()), *shape, device="cuda")
    return x.transpose(-1, -2) if transposed else x


def measure(name: str, batch: int, m: int, k: int, n: int, ta: bool, tb: bool) -> tuple[str, ...]:
    torch.manual_seed(0)
    a, b = operand(batch, m, k, ta), operand(batch, k, n, tb)
    torch.backends.cuda.matmul.allow_tf32 = False
    ref32 = torch.matmul(a, b)
    ref64 = torch.matmul(a.double(), b.double())  # freed when measure returns
    out = matmul_tf32x3(a, b)
    norm64 = torch.linalg.vector_norm(ref64)

    def err(x: torch.Tensor) -> float:
        return float(torch.linalg.vector_norm(x.double() - ref64) / norm64)

    strict = bool(torch.allclose(out, ref32, atol=1e-4, rtol=1e-4))
    errors = (err(ref32), err(out))
    t_fp32 = timed(lambda: torch.matmul(a, b))
    t_x3 = timed(lambda: matmul_tf32x3(a, b))
    torch.backends.cuda.matmul.allow_tf32 = True
    t_tf32 = timed(lambda: torch.matmul(a, b))
    torch.backends.cuda.matmul.allow_tf32 = False
    flops = 2.0 * max(batch, 1) * m * n * k
    return (
        name,
        f"{t_fp32:.3f}",
        f"{t_x3:.3f}",
        f"{t_fp32 / t_x3:.2f}x",
        f"{flops / t_x3 / 1e9:.0f}",
        f"{t_tf32:.3f}",
        f"{errors[0]:.1e}",
        f"{errors[1]:.1e}",
        "pass" if strict else "FAIL",
    )


def main() -> None:
    print(header("python bench/bench_tf32x3.py"))
    rows = []
    for shape in SHAPES:
        rows.append(measure(*shape))
        torch.cuda.empty_cache()
    print_table(
        "3xTF32 Triton GEMM vs cuBLAS FP32 (ms, CUDA-event medians of 20)",
        [
            "shape",
            "cuBLAS fp32",
            "tf32x3",
            "speedup",
            "tf32x3 TFLOP/s",
            "cuBLAS tf32 (scale)",
            "fp32 err vs fp64",
            "tf32x3 err vs fp64",
            "strict 1e-4",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
