"""RMSNorm on the GPU against a copy of the same bytes: kforge's norm (autotuned) and each of
its tile shapes (rows per tile, warps), at Llama 3 8B's width, GPT-2 medium's and 8192.

    python bench/bench_norm_tiles.py

The fraction is a copy's time over the norm's for the same bytes (x read, y written), both
CUDA-event medians of single calls. On 2026-11-27 (H100) the kernel that looped over its rows
one at a time was measured beside the tile shapes: docs/data/norm-tiles-2026-11-27.log.
"""

from __future__ import annotations

import itertools
import sys

import torch
import triton
from bench_tf32x3 import timed
from common import header, print_table
from kforge.tools import norms
from kforge.tools.launch import next_power_of_2

SHAPES = [(8192, 4096), (16384, 1024), (4096, 8192)]  # rows, width


def measure(rows: int, n: int) -> list[tuple[str, ...]]:
    """The copy, kforge's norm and the three fastest tile shapes at one shape."""
    x, w = torch.randn(rows, n, device="cuda"), torch.randn(n, device="cuda")
    ref = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    src = torch.empty(x.numel(), device="cuda")
    dst = torch.empty_like(src)
    copy = timed(lambda: dst.copy_(src), 50)
    ours = timed(lambda: norms.norm(x, None, w, None, 1e-6, True), 50)
    y = torch.empty_like(x)
    tiles = []
    for m, warps in itertools.product((1, 2, 4, 8, 16), (2, 4, 8, 16, 32)):

        def run(m: int = m, warps: int = warps) -> None:
            norms.norm_kernel[(triton.cdiv(rows, m),)](
                x, x, w, y, y, y, rows, n, 1e-6, n, n, n, n, HAS_RES=False, STORE_H=False, HAS_W=True,
                HAS_B=False, RMS=True, BLOCK_N=next_power_of_2(n), BLOCK_M=m, num_warps=warps,
            )  # fmt: skip

        try:
            run()
            tiles.append((timed(run, 50), m, warps, float((y.double() - ref).abs().max())))
        except Exception as err:  # out of registers or shared memory
            print(f"{rows} x {n}, {m} rows, {warps} warps: {type(err).__name__}")
    return [
        (f"{rows} x {n}", f"{copy * 1e3:.1f}", f"{ours * 1e3:.1f}", f"{copy / ours:.0%}",
         f"({m}, {warps})", f"{t * 1e3:.1f}", f"{copy / t:.0%}", f"{err:.1e}")
        for t, m, warps, err in sorted(tiles)[:3]
    ]  # fmt: skip


def main() -> None:
    print(header("python bench/bench_norm_tiles.py " + " ".join(sys.argv[1:])))
    torch.manual_seed(0)
    print_table(
        "RMSNorm, us (CUDA-event medians); fraction of a copy of the same bytes",
        [
            "rows x width",
            "copy",
            "kforge norm",
            "of copy",
            "tile (rows, warps)",
            "tile us",
            "of copy",
            "max err",
        ],
        [row for rows, n in SHAPES for row in measure(rows, n)],
    )


if __name__ == "__main__":
    main()
