"""Large inputs: KernelBench tasks whose inputs take GBs, evaluated by kforge with the
reference itself as the candidate (renamed ModelNew), with each result's memory figures:
one input set, the outputs, what one candidate call allocated, and the evaluation's peak.

    python bench/bench_memory.py KERNELBENCH_DIR [--tasks 1/4,1/35,1/45]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_fidelity import reference_as_candidate
from common import header, kernelbench_tasks, print_table
from kforge.tools.evaluate import EvalOptions, evaluate
from kforge.tools.task import load_task


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kernelbench", type=Path)
    parser.add_argument("--tasks", default="1/4,1/35,1/45", help="level/problem, comma-separated")
    args = parser.parse_args()
    options = EvalOptions(device="cuda", cache_dir=Path(tempfile.mkdtemp()))
    total_gb = torch.cuda.get_device_properties(0).total_memory / 2**30
    rows = []
    for item in args.tasks.split(","):
        level, number = item.split("/")
        (task_file,) = [
            f for f in kernelbench_tasks(args.kernelbench, int(level)) if f.name.split("_")[0] == number
        ]
        start = time.perf_counter()
        r = evaluate(load_task(task_file), reference_as_candidate(task_file), options)
        gb = [
            None if v is None else v / 1024
            for v in (r.inputs_mb, r.outputs_mb, r.candidate_memory_mb, r.peak_memory_mb)
        ]
        bound = None if None in gb else 3 * (gb[0] + gb[1]) + gb[2]  # type: ignore[operator]
        rows.append(
            (
                f"L{level} {task_file.stem}",
                r.status.value,
                *gb,
                bound,
                r.eager_ms,
                r.compile_ms,
                r.candidate_ms,
                time.perf_counter() - start,
            )
        )
        print(rows[-1], flush=True)
        if r.status.value != "ok":
            print(r.log[-3000:], flush=True)
    print(header(" ".join(sys.argv)) + f" | {total_gb:.0f} GiB")
    print_table(
        "large inputs: the reference as candidate (GiB; bound = 3 x (inputs + outputs) + candidate's own)",
        [
            "task",
            "status",
            "inputs",
            "outputs",
            "cand own",
            "peak",
            "bound",
            "eager ms",
            "compile ms",
            "cand ms",
            "s",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
