"""3xTF32 Triton GEMM vs cuBLAS FP32 at KernelBench's fp32 GEMM shapes, and the 3xTF32
implicit-GEMM Conv2d vs cuDNN FP32 at its convolution shapes (GPU).

For each shape: cuBLAS fp32 (TF32 off, as strict fp32 runs it), the prior kernel
``matmul_tf32x3`` on its two paths (its own Triton kernel, which splits the tiles in registers,
and kforge's, on operands split before the GEMM, a weight's split cached as in a model), both
autotuned, and plain TF32 cuBLAS for scale;
times are CUDA-event medians. Accuracy: ||out - ref64|| / ||ref64|| against a float64 product, and whether the
3xTF32 output passes the strict check (allclose to the fp32 result, atol = rtol = 1e-4).

    python bench/bench_tf32x3.py [--convs-only | --models | --resnet | --small-k]

``--small-k``: Linear layers with a short reduction (K < 512, below the tf32x3-gemm pass's
MIN_K) and many rows, as a ConvNeXt's or a small ViT's MLP has them: cuBLAS fp32, the GEMM's two
paths, and kforge's 3xTF32 convolution run as a 1 x 1 convolution over channels-last rows (it
splits the activation in registers, so no split pass); then the presplit kernel with each tile
alone (``sweep``: whole-K blocks too), at PatchTST's and PVTv2's Linears as well.
"""

from __future__ import annotations

import statistics
import sys

import torch
from common import header, print_table
from kforge.examples import ROOT as EXAMPLES

sys.path.insert(0, str(EXAMPLES / "candidates"))
import matmul_tf32x3_triton as mt  # noqa: E402
from conv2d_tf32x3_triton import conv2d_tf32x3  # noqa: E402
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

# The Linear layers of the example models at their full sizes (x @ W^T: B transposed, the
# weight an nn.Parameter): ViT-B/16 at batch 32 (6304 tokens), GPT-2 at 8 x 512, Llama 3.2
# 1B's dimensions at 4 x 512.
MODEL_SHAPES = [
    ("ViT qkv", 0, 6304, 768, 2304, False, True),
    ("ViT proj", 0, 6304, 768, 768, False, True),
    ("ViT fc1", 0, 6304, 768, 3072, False, True),
    ("ViT fc2", 0, 6304, 3072, 768, False, True),
    ("GPT-2 c_fc", 0, 4096, 768, 3072, False, True),
    ("GPT-2 mlp c_proj", 0, 4096, 3072, 768, False, True),
    ("GPT-2 lm_head", 0, 4096, 768, 50257, False, True),
    ("Llama q/o", 0, 2048, 2048, 2048, False, True),
    ("Llama k/v", 0, 2048, 2048, 512, False, True),
    ("Llama gate/up", 0, 2048, 2048, 8192, False, True),
    ("Llama down", 0, 2048, 8192, 2048, False, True),
]


# Short reductions, many rows (x @ W^T): ConvNeXt-T's stage-1 MLP at batch 32 (32 x 56 x 56
# tokens, 96 -> 384 -> 96), DeiT-S's at batch 32 (384 -> 1536 -> 384), and ViT-B's fc1 for scale.
SMALL_K_SHAPES = [
    ("ConvNeXt-T pwconv1 96->384", 0, 100352, 96, 384, False, True),
    ("ConvNeXt-T pwconv2 384->96", 0, 100352, 384, 96, False, True),
    ("DeiT-S fc1 384->1536", 0, 6304, 384, 1536, False, True),
    ("DeiT-S fc2 1536->384", 0, 6304, 1536, 384, False, True),
    ("ViT-B fc1 768->3072", 0, 6304, 768, 3072, False, True),
]


# Short reductions where the presplit kernel's own tile list (tuned for long K) may be the loss:
# each tile alone, whole-K blocks included, the activation's split counted in. PatchTST's
# Linears (unseen9: 6,896 series x 42 patches, 128 and 256 wide) and PVTv2's fc1.
SHORT_K_SWEEP = [
    ("ConvNeXt-T pwconv1 96->384", 100352, 96, 384),
    ("ConvNeXt-T pwconv2 384->96", 100352, 384, 96),
    ("PatchTST W_Q 128->128", 289632, 128, 128),
    ("PatchTST ff1 128->256", 289632, 128, 256),
    ("PVTv2 fc1 128->1024", 25088, 128, 1024),
]
SWEEP_TILES = [(64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (256, 128)]


def sweep(name: str, m: int, k: int, n: int) -> tuple[str, ...]:
    """x (m, k) @ w^T on kforge's presplit kernel with each tile of SWEEP_TILES and each BLOCK_K
    that divides the padded K, the activation's split counted in, against cuBLAS fp32 and the
    kernel's own autotuned tiles: whether a tile made for short K would lift ``MIN_K``."""
    from kforge.tools.gemm import tf32x3 as g
    from kforge.tools.launch import cdiv
    from triton.runtime.errors import OutOfResources

    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda")
    w = torch.nn.Parameter(torch.randn(n, k, device="cuda") / k**0.5, requires_grad=False)
    ref64 = x.double() @ w.double().t()
    a3, b3 = x.unsqueeze(0), w.t().unsqueeze(0)
    w_split = g.weight_split(b3)
    kp = w_split.shape[2] // 2
    c = torch.empty((1, m, n), device="cuda")
    tried = []
    for bm, bn in SWEEP_TILES:
        for bk in (bk for bk in (32, 64, 128) if kp % bk == 0):
            warps = 8 if bm * bn >= 128 * 128 else 4
            for stages in (1,) if kp == bk else (2, 3):

                def run(bm=bm, bn=bn, bk=bk, warps=warps, stages=stages) -> None:
                    a_split = g.split(a3)
                    g.gemm_kernel[(cdiv(m, bm) * cdiv(n, bn), 1)](
                        a_split, w_split, c, c, m, n, kp, a_split.stride(0), 0, c.stride(0), c.stride(1),
                        HAS_BIAS=False, ACT=0, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                        num_warps=warps, num_stages=stages,
                    )  # fmt: skip

                try:
                    run()
                    torch.cuda.synchronize()
                except OutOfResources:
                    continue
                tried.append((timed(run), f"{bm}x{bn}x{bk} w{warps} s{stages}", rel_err(c[0], ref64)))
    best = min(tried)
    t_fp32 = timed(lambda: torch.nn.functional.linear(x, w))
    t_tuned = timed(lambda: g.matmul(a3, b3))
    t_split = timed(lambda: g.split(a3))
    return (name, f"{t_fp32:.3f}", f"{t_tuned:.3f}", f"{best[0]:.3f}", best[1], f"{t_split:.3f}",
            f"{t_fp32 / best[0]:.2f}x", f"{best[2]:.1e}", str(len(tried)))  # fmt: skip


def as_conv1x1(name: str, m: int, k: int, n: int) -> tuple[str, ...]:
    """x (m, k) @ w^T as kforge's 3xTF32 convolution with a 1 x 1 filter over channels-last
    rows, against cuBLAS fp32's F.linear: ms and the error against float64."""
    from kforge.tools.gemm import conv as kconv

    torch.manual_seed(0)
    x, w = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda") / k**0.5
    rows = x.view(1, 1, m, k).permute(0, 3, 1, 2)  # (1, k, 1, m), channels-last: x itself
    w4 = w.view(n, k, 1, 1)
    ref64 = x.double() @ w.double().t()
    out = kconv.conv2d(rows, w4).permute(0, 2, 3, 1).reshape(m, n)
    t_conv = timed(lambda: kconv.conv2d(rows, w4))
    t_gelu = timed(lambda: kconv.conv2d(rows, w4, act="gelu"))
    t_fp32 = timed(lambda: torch.nn.functional.linear(x, w))
    return (name, f"{t_fp32:.3f}", f"{t_conv:.3f}", f"{t_gelu:.3f}", f"{t_fp32 / t_conv:.2f}x",
            f"{rel_err(out, ref64):.1e}", f"{rel_err(x @ w.t(), ref64):.1e}")  # fmt: skip


# (name, batch, C_in, H, W, C_out, kernel, padding): KernelBench L2 1/17, 4, 21, 25 (no
# padding, as nn.Conv2d(in, out, k) has) and a ResNet/VGG-like 3x3 layer with padding 1.
CONVS = [
    ("L2 1, 17: 64->128, 128^2", 128, 64, 128, 128, 128, 3, 0),
    ("L2 4: 64->128, 256^2", 64, 64, 256, 256, 128, 3, 0),
    ("L2 21: 8->32, 128^2", 128, 8, 128, 128, 32, 3, 0),
    ("L2 25: 16->64, 128^2", 128, 16, 128, 128, 64, 3, 0),
    ("3x3 256->256, 56^2, pad 1", 10, 256, 56, 56, 256, 3, 1),
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


def rel_err(out: torch.Tensor, ref64: torch.Tensor) -> float:
    """||out - ref64|| / ||ref64||: the error against the float64 result."""
    return float(torch.linalg.vector_norm(out.double() - ref64) / torch.linalg.vector_norm(ref64))


def operand(batch: int, rows: int, cols: int, transposed: bool) -> torch.Tensor:
    shape = (cols, rows) if transposed else (rows, cols)
    x = torch.rand(*((batch,) if batch else ()), *shape, device="cuda")
    if transposed and not batch:
        x = torch.nn.Parameter(x, requires_grad=False)  # a weight: its split is cached
    return x.transpose(-1, -2) if transposed else x


def both_paths(a: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor | float]:
    """Output and time of matmul_tf32x3 on its in-register split and on the split operands."""
    got: dict[str, torch.Tensor | float] = {}
    for path, presplit in (("registers", False), ("presplit", True)):
        mt.PRESPLIT = presplit
        got[path] = matmul_tf32x3(a, b)
        got[path + " ms"] = timed(lambda: matmul_tf32x3(a, b))
    mt.PRESPLIT = True
    return got


def measure(name: str, batch: int, m: int, k: int, n: int, ta: bool, tb: bool) -> tuple[str, ...]:
    torch.manual_seed(0)
    a, b = operand(batch, m, k, ta), operand(batch, k, n, tb)
    torch.backends.cuda.matmul.allow_tf32 = False
    ref32 = torch.matmul(a, b)
    ref64 = torch.matmul(a.double(), b.double())  # freed when measure returns
    got = both_paths(a, b)
    outs = (got["registers"], got["presplit"])
    strict = all(bool(torch.allclose(out, ref32, atol=1e-4, rtol=1e-4)) for out in outs)
    errors = (rel_err(ref32, ref64), *(rel_err(out, ref64) for out in outs))
    t_fp32 = timed(lambda: torch.matmul(a, b))
    t_triton, t_x3 = float(got["registers ms"]), float(got["presplit ms"])
    torch.backends.cuda.matmul.allow_tf32 = True
    t_tf32 = timed(lambda: torch.matmul(a, b))
    torch.backends.cuda.matmul.allow_tf32 = False
    flops = 2.0 * max(batch, 1) * m * n * k
    return (
        name,
        f"{t_fp32:.3f}",
        f"{t_triton:.3f}",
        f"{t_x3:.3f}",
        f"{t_fp32 / min(t_x3, t_triton):.2f}x",
        f"{flops / t_triton / 1e9:.0f}",
        f"{flops / t_x3 / 1e9:.0f}",
        f"{t_tf32:.3f}",
        f"{errors[0]:.1e}",
        f"{errors[1]:.1e}",
        f"{errors[2]:.1e}",
        "pass" if strict else "FAIL",
    )


# ResNet-50's convolutions at batch 32 (stride last): the stem, each stage's 3x3 and 1x1 layers.
RESNET_CONVS = [
    ("stem 7x7 3->64 /2", 32, 3, 224, 224, 64, 7, 3, 2),
    ("l1 1x1 256->64", 32, 256, 56, 56, 64, 1, 0),
    ("l1 3x3 64->64", 32, 64, 56, 56, 64, 3, 1),
    ("l1 1x1 64->256", 32, 64, 56, 56, 256, 1, 0),
    ("l2 3x3 128->128", 32, 128, 28, 28, 128, 3, 1),
    ("l2 1x1 512->128", 32, 512, 28, 28, 128, 1, 0),
    ("l3 3x3 256->256", 32, 256, 14, 14, 256, 3, 1),
    ("l3 1x1 1024->256", 32, 1024, 14, 14, 256, 1, 0),
    ("l3 1x1 256->1024", 32, 256, 14, 14, 1024, 1, 0),
    ("l4 3x3 512->512", 32, 512, 7, 7, 512, 3, 1),
    ("l4 1x1 2048->512", 32, 2048, 7, 7, 512, 1, 0),
]


def measure_conv(
    name: str, n: int, c: int, h: int, w: int, oc: int, k: int, pad: int, stride: int = 1
) -> tuple[str, ...]:
    import torch.nn.functional as F
    from kforge.tools.gemm.conv import conv2d as nhwc_conv

    torch.manual_seed(0)
    x = torch.rand(n, c, h, w, device="cuda")
    x_cl = x.contiguous(memory_format=torch.channels_last)
    weight = torch.nn.Parameter(
        torch.randn(oc, c, k, k, device="cuda") / (c * k * k) ** 0.5, requires_grad=False
    )
    w_cl = weight.contiguous(memory_format=torch.channels_last)
    bias = torch.randn(oc, device="cuda")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    ref32 = F.conv2d(x, weight, bias, stride, pad)
    ref64 = F.conv2d(x.double(), weight.double(), bias.double(), stride, pad)  # freed when this returns
    out = conv2d_tf32x3(x, weight, bias, stride, pad)
    new = nhwc_conv(x_cl, weight, bias, stride, pad)
    strict = bool(torch.allclose(out, ref32, atol=1e-4, rtol=1e-4)) and bool(
        torch.allclose(new, ref32, atol=1e-4, rtol=1e-4)
    )
    errors = (rel_err(ref32, ref64), rel_err(out, ref64), rel_err(new, ref64))
    t_x3 = timed(lambda: conv2d_tf32x3(x, weight, bias, stride, pad))
    t_new = timed(lambda: nhwc_conv(x_cl, weight, bias, stride, pad))
    t_new_nchw = timed(lambda: nhwc_conv(x, weight, bias, stride, pad))
    t_cudnn = timed(lambda: F.conv2d(x, weight, bias, stride, pad))
    torch.backends.cudnn.benchmark = True
    t_bench = timed(lambda: F.conv2d(x, weight, bias, stride, pad))
    t_cl = timed(lambda: F.conv2d(x_cl, w_cl, bias, stride, pad))
    torch.backends.cudnn.allow_tf32 = True
    t_tf32 = timed(lambda: F.conv2d(x, weight, bias, stride, pad))
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    oh, ow = ref32.shape[2], ref32.shape[3]
    flops = 2.0 * n * oc * oh * ow * c * k * k
    best = min(t_cudnn, t_bench, t_cl)
    return (
        name,
        f"{t_cudnn:.3f}",
        f"{t_bench:.3f}",
        f"{t_cl:.3f}",
        f"{t_x3:.3f}",
        f"{t_new:.3f}",
        f"{t_new_nchw:.3f}",
        f"{best / t_new:.2f}x",
        f"{flops / t_new / 1e9:.0f}",
        f"{t_tf32:.3f}",
        f"{errors[0]:.1e}",
        f"{errors[1]:.1e}",
        f"{errors[2]:.1e}",
        "pass" if strict else "FAIL",
    )


def main() -> None:
    print(header("python bench/bench_tf32x3.py " + " ".join(sys.argv[1:])))
    rows = []
    shapes = MODEL_SHAPES if "--models" in sys.argv else SMALL_K_SHAPES if "--small-k" in sys.argv else SHAPES
    for shape in [] if "--convs-only" in sys.argv or "--resnet" in sys.argv else shapes:
        rows.append(measure(*shape))
        torch.cuda.empty_cache()
    print_table(
        "3xTF32 GEMM (split in registers; operands split first) vs cuBLAS FP32 (ms, CUDA-event medians of 20)",
        [
            "shape",
            "cuBLAS fp32",
            "x3 registers",
            "x3 presplit",
            "best x3 speedup",
            "registers TFLOP/s",
            "presplit TFLOP/s",
            "cuBLAS tf32 (scale)",
            "fp32 err vs fp64",
            "registers err vs fp64",
            "presplit err vs fp64",
            "strict 1e-4 (both)",
        ],
        rows,
    )
    if "--small-k" in sys.argv:
        print_table(
            "the same Linear layers on kforge's 3xTF32 convolution as 1 x 1 (ms, CUDA-event medians of 20)",
            [
                "shape",
                "cuBLAS fp32",
                "x3 conv 1x1",
                "x3 conv 1x1 + GELU",
                "speedup",
                "err vs fp64",
                "fp32 err",
            ],
            [as_conv1x1(name, m, k, n) for name, _, m, k, n, _, _ in SMALL_K_SHAPES],
        )
        print_table(
            "presplit 3xTF32 GEMM, each tile alone, split included (ms, CUDA-event medians of 20)",
            ["layer", "cuBLAS fp32", "x3 autotuned", "x3 best tile", "tile", "split alone", "best vs cuBLAS",
             "err vs fp64", "tiles run"],
            [sweep(*layer) for layer in SHORT_K_SWEEP],
        )  # fmt: skip
        return
    convs = []
    for conv in [] if "--models" in sys.argv else RESNET_CONVS if "--resnet" in sys.argv else CONVS:
        convs.append(measure_conv(*conv))
        torch.cuda.empty_cache()
    print_table(
        "3xTF32 implicit-GEMM Conv2d (+ bias) vs cuDNN FP32 (ms, CUDA-event medians of 20)",
        [
            "conv",
            "cuDNN fp32",
            "cuDNN fp32 benchmark",
            "cuDNN fp32 benchmark NHWC",
            "x3 NCHW registers (old)",
            "x3 NHWC presplit W",
            "x3 kforge NCHW in and out",
            "NHWC vs best cuDNN",
            "NHWC TFLOP/s",
            "cuDNN tf32 benchmark (scale)",
            "fp32 err vs fp64",
            "old err vs fp64",
            "NHWC err vs fp64",
            "strict 1e-4",
        ],
        convs,
    )


if __name__ == "__main__":
    main()
