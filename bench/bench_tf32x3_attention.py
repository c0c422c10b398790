"""kforge's flash attention with 3xTF32 products against PyTorch's fp32 attention (GPU).

At the example models' attention shapes (ViT-B/16, GPT-2, Llama 3.2 1B's dimensions with its
grouped key heads) and a few longer ones: ``F.scaled_dot_product_attention`` in strict fp32
(which picks the memory-efficient kernel: flash has no fp32 path), its math path, the
candidate ``attention_triton.py`` (flash attention with IEEE fp32 dots, on the CUDA cores),
and kforge's kernel (tools/gemm/attention.py, autotuned). Times are CUDA-event medians; the
error is ||out - ref64|| / ||ref64|| against float64 attention, and the max error beside it.

    python bench/bench_tf32x3_attention.py
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from bench_tf32x3 import rel_err, timed
from common import header, print_table
from kforge.examples import ROOT as EXAMPLES
from kforge.tools.gemm import attention

sys.path.insert(0, str(EXAMPLES / "candidates"))
import attention_triton  # noqa: E402

SHAPES = [  # name, batch, query heads, key heads, length, head dim, causal
    ("ViT-B/16", 32, 12, 12, 197, 64, False),
    ("GPT-2", 8, 12, 12, 512, 64, True),
    ("Llama 1B (GQA 4)", 4, 32, 8, 512, 64, True),
    ("2k causal", 4, 16, 16, 2048, 64, True),
    ("2k, d 128", 4, 16, 16, 2048, 128, False),
]


def measure(name: str, b: int, hq: int, hk: int, n: int, d: int, causal: bool) -> tuple[object, ...]:
    q = torch.randn(b, hq, n, d, device="cuda")
    k, v = torch.randn(b, hk, n, d, device="cuda"), torch.randn(b, hk, n, d, device="cuda")
    gqa = hq != hk
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, enable_gqa=gqa)
    sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)  # noqa: E731
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        math_out = sdpa()
        t_math = timed(sdpa, 10)
    ours = lambda: attention.sdpa(q, k, v, causal, 0.0)  # noqa: E731
    out, fp32 = ours(), sdpa()
    t_sdpa, t_ours = timed(sdpa), timed(ours)
    ieee = "-"
    if not causal and not gqa:  # the candidate file computes plain attention
        cand = attention_triton.ModelNew().cuda()
        ieee = f"{timed(lambda: cand(q, k, v)):.3f}"
    flops = 4.0 * b * hq * n * n * d / (2 if causal else 1)
    return (
        name, f"{t_sdpa:.3f}", f"{t_math:.3f}", ieee, f"{t_ours:.3f}", f"{t_sdpa / t_ours:.2f}x",
        f"{flops / t_ours / 1e9:.0f}", f"{rel_err(fp32, ref):.1e}", f"{rel_err(math_out, ref):.1e}",
        f"{rel_err(out, ref):.1e}", f"{float((out.double() - ref).abs().max()):.1e}",
    )  # fmt: skip


def main() -> None:
    print(header("python bench/bench_tf32x3_attention.py"))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    rows = [measure(*shape) for shape in SHAPES]
    print_table(
        "attention, ms (CUDA-event medians); error vs float64",
        ["shape", "sdpa fp32", "math", "ieee flash", "kforge 3xTF32", "vs sdpa", "TFLOP/s",
         "err sdpa", "err math", "err kforge", "max err kforge"],
        rows,
    )  # fmt: skip


if __name__ == "__main__":
    main()
