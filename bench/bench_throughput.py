"""Throughput: candidates fully evaluated per minute on one GPU, for a batch of candidates
(the example reference kernels), with the compile cache cold and then warm.

Every candidate is fully evaluated: built, verified over 5 trials, checked for cheats and
timed against eager and torch.compile in its own worker. With ``--write-measured`` the cold
run's results are saved as the measured results of the corpus's prior kernels.

    python bench/bench_throughput.py [--limit 20] [--write-measured corpus/kernels/measured.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from common import header, print_table
from kforge.examples import catalog_pairs
from kforge.tools.evaluate import EvalOptions, build, evaluate_many
from kforge.tools.hardware import detect_gpu
from kforge.tools.result import Result
from kforge.tools.task import load_task, parse_candidate


def run_batch(pairs: list[tuple[Path, Path]], options: EvalOptions) -> tuple[float, dict[Path, Result]]:
    by_task: dict[Path, list[Path]] = defaultdict(list)
    for task_file, cand_file in pairs:
        by_task[task_file].append(cand_file)
    results: dict[Path, Result] = {}
    start = time.monotonic()
    # Every CUDA build of the batch starts at once in the CPU pool, ahead of the GPU.
    with ThreadPoolExecutor(max_workers=options.compile_workers) as pool:
        builds = [pool.submit(build, parse_candidate(c.read_text()), options) for _, c in pairs]
        for future in builds:
            future.result()
    print(f"  builds done after {time.monotonic() - start:.1f} s", flush=True)
    for task_file, cands in by_task.items():
        task = load_task(task_file)
        task_start = time.monotonic()
        found = evaluate_many(task, [c.read_text() for c in cands], options)
        for cand_file, result in zip(cands, found, strict=True):
            results[cand_file] = result
            phases = next((line for line in result.log.splitlines() if line.startswith("phases:")), "")
            print(
                f"  {cand_file.name:30s} {result.status.value:10s} {result.speedup_vs_eager or 0:6.2f}x  {phases}"
            )
        print(f"  {task_file.name}: {time.monotonic() - task_start:.1f} s", flush=True)
    return time.monotonic() - start, results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--write-measured", type=Path)
    parser.add_argument("--no-compile-baseline", action="store_true")
    parser.add_argument("--compile-workers", type=int, default=8)
    parser.add_argument("--passes", default="cold,warm", help="cold, warm or both (the same cache folder)")
    parser.add_argument("--cache", type=Path, help="cache folder (default: a new, empty one)")
    parser.add_argument("--only", help="comma-separated candidate file names to evaluate")
    args = parser.parse_args()
    pairs = catalog_pairs()[: args.limit]
    if args.only:
        pairs = [p for p in pairs if p[1].name in args.only.split(",")]
    if args.device == "cpu":
        pairs = [p for p in pairs if not p[1].name.endswith("_cuda.py")]
    cache = args.cache or Path(tempfile.mkdtemp(prefix="kforge-bench-"))
    options = EvalOptions(
        device=args.device,
        cache_dir=cache,
        compile_baseline=not args.no_compile_baseline,
        compile_workers=args.compile_workers,
    )
    rows = []
    for i, label in enumerate(args.passes.split(",")):
        print(f"{label} compile cache:", flush=True)
        seconds, results = run_batch(pairs, options)
        ok = sum(r.status.value == "ok" for r in results.values())
        rows.append((label, len(results), ok, seconds, 60.0 * len(results) / seconds))
        print(rows[-1], flush=True)
        if i == 0:  # the kernels' results, kept even when a later pass is cut short
            report_kernels(results, args.write_measured)
    print(header(" ".join(sys.argv)))
    print_table(
        "evaluation throughput", ["compile cache", "candidates", "ok", "seconds", "candidates/min"], rows
    )


def report_kernels(first: dict[Path, Result], write_measured: Path | None) -> None:
    summary = [
        (
            c.name,
            r.status.value,
            r.candidate_ms,
            r.eager_ms,
            r.compile_ms,
            r.speedup_vs_eager,
            r.speedup_vs_compile,
            r.roofline_fraction,
        )
        for c, r in first.items()
    ]
    print_table(
        "example kernels (first pass)",
        ["candidate", "status", "ms", "eager ms", "compile ms", "vs eager", "vs compile", "of roofline"],
        summary,
    )
    for c, r in first.items():
        if r.status.value != "ok":
            print(f"--- {c.name}: {r.status.value} {r.cheats}\n{r.log[-1500:]}", flush=True)
    if write_measured:
        gpu = detect_gpu()
        measured = {
            "gpu": gpu.canonical if gpu else None,
            "measured_on": f"{datetime.date.today()} {gpu.name if gpu else 'cpu'}",
            "results": {f"candidates/{c.name}": r.headline() for c, r in first.items()},
        }
        write_measured.write_text(json.dumps(measured, indent=1) + "\n")


if __name__ == "__main__":
    main()
