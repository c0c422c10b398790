"""kforge's flash attention with 3xTF32 products against PyTorch's fp32 attention (GPU).

At the example models' attention shapes (ViT-B/16, GPT-2, Llama 3.2 1B's dimensions with its
grouped key heads) and a few longer ones: ``F.scaled_dot_product_attention`` in strict fp32
(which picks the memory-efficient kernel: flash has no fp32 path), its math path, the
candidate ``attention_triton.py`` (flash attention with IEEE fp32 dots, on the CUDA cores),
and kforge's kernel (tools/gemm/attention.py, autotuned). Times are CUDA-event medians; the
error is ||out - ref64|| / ||ref64|| against float64 attention, and the max error beside it.

    python bench/bench_tf32x3_attention.py [--sweep [NAME] | --masks | --relpos]

``--sweep`` times every tile configuration at the three models' shapes and Gemma 3's head dim
256; ``--masks`` times the kernel with a bias (BLOOM's ALiBi, BERT's padding, T5's position
bias) or a sliding window (Mistral's, Gemma's) against PyTorch's SDPA given the one mask that
means the same; T5's bias and padding mask also given to the kernel apart (a tile and a row);
and SAM's decomposed relative positions (its global and windowed attention): the kernel reading
the two tables against SAM's own code (matmul, the 5-D add, softmax, matmul), eagerly and under
torch.compile, and PyTorch's SDPA given their (L, S) sum; ``--relpos`` that last table alone.
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
    ("Gemma 3 1B (GQA 4, d 256)", 2, 4, 1, 2048, 256, True),
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
    ours = lambda: attention.sdpa(q, k, v, causal, None)  # noqa: E731
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


SWEEP = [(m, n, w, st) for m in (64, 128) for n in (32, 64, 128) for w in (4, 8) for st in (2, 3)]
WIDE_SWEEP = [(m, n, w, st) for m in (32, 64) for n in (16, 32, 64) for w in (4, 8) for st in (1, 2)]


def sweep(name: str, b: int, hq: int, hk: int, n: int, d: int, causal: bool) -> list[tuple[object, ...]]:
    """Each tile configuration of the kernel: the fastest three, PyTorch's attention beside them.
    (The 2026-11-26 sweep also tried K and V split before the kernel: slower at every shape.)"""
    import triton

    q = torch.randn(b, hq, n, d, device="cuda")
    k, v = torch.randn(b, hk, n, d, device="cuda"), torch.randn(b, hk, n, d, device="cuda")
    t_sdpa = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hq != hk))
    out = torch.empty_like(q)
    found = []
    for bm, bn, w, st in SWEEP if d <= 128 else WIDE_SWEEP:

        def run(bm=bm, bn=bn, w=w, st=st):
            attention.attention_kernel[(triton.cdiv(n, bm), b * hq)](
                q, k, v, out, out, out, hq, hq // hk, n, n, d, 1.0, 2 * n, *q.stride(), *k.stride(),
                *v.stride(), 0, 0, 0, 0, 0, 0, 0, CAUSAL=causal, BIAS=0, BLOCK_M=bm, BLOCK_N=bn,
                BLOCK_D=max(16, triton.next_power_of_2(d)), num_warps=w, num_stages=st,
            )  # fmt: skip

        try:
            found.append((timed(run, 10), (bm, bn, w, st)))
        except Exception as err:  # out of shared memory or registers
            print(f"{name} {(bm, bn, w, st)}: {type(err).__name__}")
    return [
        (name, f"{t_sdpa:.3f}", str(cfg), f"{t:.3f}", f"{t_sdpa / t:.2f}x") for t, cfg in sorted(found)[:3]
    ]


def alibi(heads: int, length: int) -> torch.Tensor:
    """BLOOM's ALiBi bias, (heads, 1, length): each head's slope times the key's position."""
    base = 2 ** (-(2 ** -(torch.log2(torch.tensor(float(heads))) - 3)))
    slopes = base ** torch.arange(1, heads + 1, device="cuda")
    return slopes[:, None, None] * torch.arange(length, device="cuda", dtype=torch.float32)


MASKED = [  # name, q, k/v shape, bias (None or a function of the device), causal, window
    ("BLOOM-560m ALiBi (64 flat heads, 1024, d 64)", (64, 1024, 64), (64, 1024, 64),
     lambda: alibi(16, 1024).repeat(4, 1, 1), True, 0),
    ("BERT-large padding (8 x 16 heads, 512, d 64)", (8, 16, 512, 64), (8, 16, 512, 64),
     lambda: torch.where(torch.rand(8, 1, 1, 512, device="cuda") < 0.2, -1e4, 0.0), False, 0),
    ("T5-base position bias + padding (8 x 12, 512, d 64)", (8, 12, 512, 64), (8, 12, 512, 64),
     lambda: torch.randn(1, 12, 512, 512, device="cuda") + torch.where(
         torch.rand(8, 1, 1, 512, device="cuda") < 0.2, -1e9, 0.0), False, 0),
    ("T5-base, the same bias and padding read apart (tile + row)", (8, 12, 512, 64), (8, 12, 512, 64),
     lambda: (torch.randn(512, 512, 12, device="cuda").permute(2, 0, 1)[None],
              torch.where(torch.rand(8, 1, 1, 512, device="cuda") < 0.2, -1e9, 0.0)), False, 0),
    ("Mistral-7B window 1024 (32 over 8 heads, 4096, d 128)", (1, 32, 4096, 128), (1, 8, 4096, 128),
     None, True, 1024),
    ("Gemma 3 1B window 512 (2 x 4 over 1 head, 2048, d 256)", (2, 4, 2048, 256), (2, 1, 2048, 256),
     None, True, 512),
    ("Mistral-7B's mask from its input: window 4096 + padding as a tile (32 over 8, 5120, d 128)",
     (1, 32, 5120, 128), (1, 8, 5120, 128), lambda: mistral_mask(5120, 4096), False, 0),
]  # fmt: skip


def mistral_mask(length: int, window: int) -> torch.Tensor:
    """transformers' Mistral mask as the dev task builds it from ``attention_mask`` (no padding
    here): finfo.min above the diagonal and outside the window, (1, 1, L, L)."""
    i, j = torch.arange(length, device="cuda")[:, None], torch.arange(length, device="cuda")[None, :]
    hidden = (j > i) | (j <= i - window)
    return torch.zeros(1, 1, length, length, device="cuda").masked_fill(
        hidden, torch.finfo(torch.float32).min
    )


def skipping(length: int = 5120, window: int = 4096) -> tuple[str, ...]:
    """The kernel on Mistral's tile with its fully masked blocks passed over and without."""
    q, k, v = (
        torch.randn(1, 32, length, 128, device="cuda"),
        *(torch.randn(1, 8, length, 128, device="cuda") for _ in range(2)),
    )
    bias = mistral_mask(length, window)
    times = {}
    for skip in (True, False):
        attention.SKIP_MASKED = skip
        times[skip] = timed(lambda: attention.sdpa(q, k, v, False, None, bias))
    attention.SKIP_MASKED = True
    return (
        f"{length} tokens, window {window}",
        f"{times[False]:.3f}",
        f"{times[True]:.3f}",
        f"{times[False] / times[True]:.2f}x",
    )


def masked(
    name: str, qs: tuple[int, ...], ks: tuple[int, ...], make: object, causal: bool, window: int
) -> tuple[object, ...]:
    """kforge's kernel with the bias or window against PyTorch's SDPA given the one mask that
    means the same (what the FX pass emits for PyTorch), and the math path."""
    q, k, v = torch.randn(qs, device="cuda"), torch.randn(ks, device="cuda"), torch.randn(ks, device="cuda")
    made = make() if callable(make) else None
    bias, key_bias = made if isinstance(made, tuple) else (made, None)  # two masks: given apart
    length = q.shape[-2]
    i, j = torch.arange(length, device="cuda")[:, None], torch.arange(length, device="cuda")[None, :]
    hidden = (j > i) | ((i - j >= window) if window else torch.zeros_like(j > i)) if causal else None
    summed = bias if key_bias is None else bias + key_bias
    mask = summed if hidden is None else torch.where(hidden, float("-inf"), 0.0 if summed is None else summed)
    gqa = q.dim() == 4 and q.shape[1] != k.shape[1]
    ref = F.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=mask.double(), enable_gqa=gqa
    )
    sdpa = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)  # noqa: E731
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        t_math = timed(sdpa, 10)
    ours = lambda: attention.sdpa(q, k, v, causal, None, bias, window, key_bias)  # noqa: E731
    out, fp32 = ours(), sdpa()
    t_sdpa, t_ours = timed(sdpa), timed(ours)
    return (
        name, f"{t_sdpa:.3f}", f"{t_math:.3f}", f"{t_ours:.3f}", f"{t_sdpa / t_ours:.2f}x",
        f"{rel_err(fp32, ref):.1e}", f"{rel_err(out, ref):.1e}",
    )  # fmt: skip


RELPOS = [  # name, flat heads (batch * heads), grid side, head dim: SAM ViT-B's blocks at 1024 x 1024
    ("SAM ViT-B global (12 heads, 64 x 64 tokens, d 64)", 12, 64, 64),
    ("SAM ViT-B windowed (25 windows x 12 heads, 14 x 14, d 64)", 300, 14, 64),
]


def relpos(name: str, heads: int, side: int, d: int) -> tuple[str, ...]:
    """SAM's attention with decomposed relative positions: its own code, eagerly and compiled,
    SDPA with the (L, S) sum of the tables as the mask, and the kernel reading the tables."""
    length = side * side
    q, k, v = (torch.randn(heads, length, d, device="cuda") for _ in range(3))
    rel_h, rel_w = (torch.randn(heads, side, side, side, device="cuda") * 0.5 for _ in range(2))

    def sam(q, k, v, rel_h, rel_w):  # add_decomposed_rel_pos as segment-anything writes it
        attn = (q * d**-0.5) @ k.transpose(-2, -1)
        attn = attn.view(heads, side, side, side, side) + rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]
        return attn.view(heads, length, length).softmax(dim=-1) @ v

    ref = sam(q.double(), k.double(), v.double(), rel_h.double(), rel_w.double())
    tables = rel_h.reshape(heads, length, side), rel_w.reshape(heads, length, side)
    mask = (tables[0][..., :, None] + tables[1][..., None, :]).flatten(-2)
    compiled = torch.compile(sam)
    runs = {
        "eager": lambda: sam(q, k, v, rel_h, rel_w),
        "compile": lambda: compiled(q, k, v, rel_h, rel_w),
        "sdpa": lambda: F.scaled_dot_product_attention(q * d**-0.5, k, v, attn_mask=mask, scale=1.0),
        "kforge": lambda: attention.sdpa(q * d**-0.5, k, v, False, 1.0, None, 0, None, *tables),
    }
    times = {key: timed(fn) for key, fn in runs.items()}
    errors = {key: rel_err(fn(), ref) for key, fn in runs.items()}
    return (
        name, *(f"{times[key]:.3f}" for key in runs), f"{times['compile'] / times['kforge']:.2f}x",
        f"{errors['eager']:.1e}", f"{errors['kforge']:.1e}",
    )  # fmt: skip


def masks_and_relpos(masks: bool) -> None:
    """--masks: the masked attentions, the skipped blocks and SAM's tables; --relpos: SAM's
    tables alone (its global block, compiled and against float64, takes minutes)."""
    if masks:
        rows = [masked(*case) for case in MASKED]
        cols = ["block", "sdpa fp32, mask", "math", "kforge 3xTF32", "vs sdpa", "err sdpa", "err kforge"]
        print_table(
            "attention with a bias or a window, ms (CUDA-event medians); error vs float64", cols, rows
        )
        print_table(
            "the kernel on a mask tile: fully masked key blocks swept or passed over, ms (CUDA-event medians)",
            ["Mistral-7B's mask", "every block", "masked blocks passed over", "gain"],
            [skipping()],
        )
    print_table(
        "SAM's decomposed relative positions, ms (CUDA-event medians); error vs float64",
        ["attention", "SAM eager", "compile", "sdpa, (L, S) mask", "kforge, two tables", "vs compile",
         "err eager", "err kforge"],
        [relpos(*case) for case in RELPOS],
    )  # fmt: skip


def main() -> None:
    print(header("python bench/bench_tf32x3_attention.py " + " ".join(sys.argv[1:])))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    if "--sweep" in sys.argv:
        # the three models' shapes, and Gemma's head dim 256 (the wide tiles); a word after
        # --sweep keeps the shapes whose name has it ("--sweep Gemma")
        after = sys.argv[sys.argv.index("--sweep") + 1 :]
        shapes = [s for s in SHAPES[:3] + SHAPES[-1:] if not after or after[0] in s[0]]
        rows = [row for shape in shapes for row in sweep(*shape)]
        cols = ["shape", "sdpa fp32 ms", "(BLOCK_M, BLOCK_N, warps, stages)", "kforge ms", "vs sdpa"]
        print_table("the kernel's tile configurations, fastest three per split", cols, rows)
        return
    if "--masks" in sys.argv or "--relpos" in sys.argv:
        masks_and_relpos("--masks" in sys.argv)
        return
    rows = [measure(*shape) for shape in SHAPES]
    print_table(
        "attention, ms (CUDA-event medians); error vs float64",
        ["shape", "sdpa fp32", "math", "ieee flash", "kforge 3xTF32", "vs sdpa", "TFLOP/s",
         "err sdpa", "err math", "err kforge", "max err kforge"],
        rows,
    )  # fmt: skip


if __name__ == "__main__":
    main()
