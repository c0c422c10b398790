"""Host time of one fp16 GEMM call: kforge's tuned kernel against torch.matmul (issue 21).

A small GEMM is host-bound: back to back, its offline time is the time the host takes to
submit a call, not the kernel's. This prints, per shape, the host microseconds per call
(N calls submitted back to back, the clock stopped when the last returns, the queue never
full) and the offline time per call (N calls between two CUDA events after an L2 flush) of:

* ``torch.matmul``;
* ``kforge.gemm.matmul``, the dispatcher, with the shape's config in its table;
* ``hgemm``, the kernel with its config (the compiled-launch fast path);
* ``launch``, the plan's launch closure alone (C's allocation and Triton's launcher);
* ``torch.empty``, C's allocation alone.

Every callable runs interleaved with the others, in rounds, and the medians over rounds are
printed. Usage: ``python3 bench/bench_hgemm_host.py [--rounds 15] [--calls 200]
[M,N,K:CONFIG ...]`` (configs as ``kforge gemm`` names them); the defaults are middle shapes
where the tuned kernel lost to torch.matmul offline
(docs/log/2026-11-23-hgemm-host-path.md)."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import torch
from common import host_us
from kforge.tools.gemm import dispatch
from kforge.tools.gemm import kernels as hg
from kforge.tools.gemm.search import time_offline
from rich.console import Console
from rich.table import Table

DEFAULT = [
    "4096,512,512:128x128x64-g8-s1-w8-p4",
    "12288,512,512:128x128x64-g8-s1-w4-p4",
    "512,1024,4096:64x64x64-g8-s1-w4-p5",
    "128,128,128:32x128x64-g8-s1-w4-p4",
    "2048,2048,8192:128x256x64-g8-s1-w8-p4",
]


def offline_us(fn: Callable[[], object], calls: int, flush: torch.Tensor) -> float:
    return time_offline(fn, flush, reps=calls, rounds=1) * 1e3


def measure(spec: str, rounds: int, calls: int, flush: torch.Tensor) -> list[tuple[str, ...]]:
    """One shape's rows: (shape, config, callable, host µs, offline µs, torch / it)."""
    dims, name = spec.split(":")
    m, n, k = (int(x) for x in dims.split(","))
    cfg = hg.HgemmConfig.from_name(name)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    dispatch._table_for(0)[(m, n, k)] = cfg  # the dispatcher's table, this process only
    out = hg.hgemm(a, b, cfg)  # compiles; the next calls take the fast path
    assert hg.relative_error(out, hg.reference(a, b)) < hg.TOLERANCE
    plan = hg._LAUNCHES[(cfg, a.shape, b.shape, a.stride(), b.stride())]
    assert plan.launch is not None
    fns: dict[str, Callable[[], object]] = {
        "torch.matmul": lambda: torch.matmul(a, b),
        "kforge.gemm.matmul": lambda: dispatch.matmul(a, b),
        "hgemm": lambda: hg.hgemm(a, b, cfg),
        "launch": lambda: plan.launch(a, b),  # type: ignore[misc]
        "torch.empty": lambda: torch.empty((m, n), device=a.device, dtype=torch.float16),
    }
    host: dict[str, list[float]] = {fn_name: [] for fn_name in fns}
    offline: dict[str, list[float]] = {fn_name: [] for fn_name in fns}
    for fn in fns.values():
        for _ in range(20):
            fn()
    for r in range(rounds):
        names = list(fns)
        for fn_name in names[r % len(names) :] + names[: r % len(names)]:
            host[fn_name].append(host_us(fns[fn_name], calls))
            offline[fn_name].append(offline_us(fns[fn_name], calls, flush))
    base = statistics.median(offline["torch.matmul"])
    rows: list[tuple[str, ...]] = []
    for fn_name in fns:
        off = statistics.median(offline[fn_name])
        ratio = f"{base / off:.3f}" if fn_name != "torch.empty" else ""
        rows.append(
            (f"{m}x{n}x{k}", name, fn_name, f"{statistics.median(host[fn_name]):.2f}", f"{off:.2f}", ratio)
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="*", default=DEFAULT)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    props = torch.cuda.get_device_properties(0)
    table = Table(title=f"host and offline time per call, µs ({props.name}, torch {torch.__version__})")
    for col in ("shape", "config", "callable", "host µs", "offline µs", "torch / it, offline"):
        table.add_column(col)
    for spec in args.shapes:
        for row in measure(spec, args.rounds, args.calls, flush):
            table.add_row(*row)
        table.add_section()
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
