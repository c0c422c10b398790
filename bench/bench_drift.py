"""Host drift: how far does a launch-bound callable's time move within one process?

One process builds a task's reference twice (eager, and a second instance as an honest
candidate) and torch.compile of it, then alternates, ``--windows`` times: each callable in
its own plain cold-L2 event loop (kforge's ``Timer.plain_loops``), then the three interleaved
in blocks as kforge's worker times them (``Timer.time_many``). If the plain loops of one
callable move between windows by more than the interleaved twins differ within a window, the
host's speed is drifting, and only callables timed interleaved can be compared (issue 17).
``--processes`` fresh processes, one after the other.

    python bench/bench_drift.py KERNELBENCH_DIR --task 3/22 [--windows 4] [--processes 2]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from common import header, kernelbench_tasks, print_table

ONE = r"""
import sys
from pathlib import Path
import torch
from kforge.tools.guards import set_precision_flags
from kforge.tools.quiet import stop_compile_pools
from kforge.tools.task import import_file
from kforge.tools.timing import LocalSlot, Timer

set_precision_flags("fp32")
module = import_file(Path(sys.argv[1]), "drift_task")
torch.manual_seed(0)
reference = module.Model(*module.get_init_inputs()).cuda()
twin = module.Model(*module.get_init_inputs()).cuda()
inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
timer = Timer(torch.device("cuda"), trials=100, max_seconds=10)
with torch.no_grad():
    compiled = torch.compile(reference)
    for _ in range(3):
        compiled(*inputs)
    stop_compile_pools()
    calls = {"eager": lambda: reference(*inputs), "compile": lambda: compiled(*inputs)}
    for window in range(int(sys.argv[2])):
        plain = {name: timer.time(fn).median_ms for name, fn in calls.items()}
        slots = {name: LocalSlot(timer, fn) for name, fn in (calls | {"twin": lambda: twin(*inputs)}).items()}
        rounds = timer.time_many(slots)
        print("WINDOW", plain["eager"], plain["compile"], *(rounds[n].median_ms for n in ("eager", "compile", "twin")))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kernelbench", type=Path)
    parser.add_argument("--task", default="3/22", help="KernelBench level/problem")
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    level, number = args.task.split("/")
    task_file = next(
        f for f in kernelbench_tasks(args.kernelbench, int(level)) if f.name.split("_")[0] == number
    )
    print(header(" ".join(sys.argv)))
    rows, spread, twins = [], [], []
    for process in range(args.processes):
        done = subprocess.run(
            [sys.executable, "-c", ONE, str(task_file), str(args.windows)], capture_output=True, text=True
        )
        windows = [
            [float(x) for x in line.split()[1:]]
            for line in done.stdout.splitlines()
            if line.startswith("WINDOW")
        ]
        if not windows:
            raise SystemExit(f"{task_file.stem}: the process failed:\n{done.stderr[-2000:]}")
        for i, (plain_eager, plain_compile, eager, compiled, twin) in enumerate(windows):
            rows.append((process, i, plain_eager, eager, twin, twin / eager, plain_compile, compiled))
            twins.append(twin / eager)
        plain = [w[0] for w in windows]
        spread.append(max(plain) / min(plain))
    print_table(
        f"{task_file.stem}: plain loops and interleaved rounds alternated in one process (ms)",
        [
            "process",
            "window",
            "eager plain",
            "eager rounds",
            "twin rounds",
            "twin / eager",
            "compile plain",
            "compile rounds",
        ],
        rows,
    )
    print(
        f"eager plain loops, slowest / fastest window per process: {' '.join(f'{s:.2f}' for s in spread)}; "
        f"twin / eager in the same rounds: median {statistics.median(twins):.3f}, "
        f"min {min(twins):.3f}, max {max(twins):.3f}"
    )


if __name__ == "__main__":
    main()
