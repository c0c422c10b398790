"""Fidelity: is kforge's eager time the time a plain, careful CUDA-event loop measures?

For each KernelBench task (problems 1..N of each level, by number, whatever their
results), the eager reference is timed twice in the same run: by kforge (its own worker,
`measure_baseline`) and by a plain loop in this process (cold L2, CUDA events, 100 runs,
median, TF32 off as under kforge's strict fp32). The median of the ratios should be
within 5% of 1.

    python bench/bench_fidelity.py KERNELBENCH_DIR [--per-level 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import header, kernelbench_tasks, print_table
from kforge.tools.evaluate import EvalOptions, measure_baseline
from kforge.tools.guards import set_precision_flags
from kforge.tools.task import import_file, load_task


def plain_eager_ms(task_file: Path, trials: int = 100) -> float:
    """The simplest honest measurement: flush L2, event, call, event, synchronize."""
    set_precision_flags("fp32")
    module = import_file(task_file, f"plain_{task_file.stem}")
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    flush = torch.empty(
        2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.int8, device="cuda"
    )
    samples = []
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        torch.cuda.synchronize()
        for _ in range(trials):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(*inputs)
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
    del model, inputs, flush
    torch.cuda.empty_cache()
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kernelbench", type=Path)
    parser.add_argument("--per-level", type=int, default=7)
    parser.add_argument("--skip", type=int, default=0, help="skip the first N tasks of the selection")
    args = parser.parse_args()
    options = EvalOptions(device="cuda", compile_baseline=False, cache_dir=Path(tempfile.mkdtemp()))
    rows, ratios = [], []
    selection = [
        (level, task_file)
        for level in (1, 2, 3)
        for task_file in kernelbench_tasks(args.kernelbench, level, args.per_level)
    ]
    for level, task_file in selection[args.skip :]:
        start = time.perf_counter()
        kforge_ms = measure_baseline(load_task(task_file), options).eager_ms
        worker_s = time.perf_counter() - start
        plain_ms = plain_eager_ms(task_file)
        print(f"L{level} {task_file.stem}: kforge worker {worker_s:.1f} s", flush=True)
        if kforge_ms is None:
            rows.append((f"L{level} {task_file.stem}", "failed", plain_ms, "-"))
            continue
        ratios.append(kforge_ms / plain_ms)
        rows.append((f"L{level} {task_file.stem}", kforge_ms, plain_ms, kforge_ms / plain_ms))
        print(rows[-1], flush=True)
    print(header(" ".join(sys.argv)))
    print_table(
        "eager time: kforge vs a plain cold-L2 CUDA-event loop",
        ["task", "kforge ms", "plain ms", "ratio"],
        rows,
    )
    print(
        f"tasks {len(ratios)}  median ratio {statistics.median(ratios):.4f}  "
        f"min {min(ratios):.3f}  max {max(ratios):.3f}"
    )


if __name__ == "__main__":
    main()
