"""Fidelity: is kforge's eager time the time a plain, careful CUDA-event loop measures?

For each KernelBench task (problems 1..N of each level, by number, whatever their
results), the eager reference is timed twice in the same run: by kforge (its own worker,
`measure_baseline`) and by a plain loop in this process (cold L2, CUDA events, 100 runs,
median, TF32 off as under kforge's strict fp32). The median of the ratios should be
within 5% of 1.

With ``--launch-bound``, eager and torch.compile are timed beside a candidate instead, by
two checks, ``--repeat`` workers each. Tasks: a 20-op elementwise chain and a naive causal
attention (bench/tasks), and the KernelBench L3 networks of many small layers given by
``--tasks`` (level/problem).

- **Twins in the same rounds.** Each callable's twin is evaluated as the candidate: the
  reference renamed ModelNew (eager's twin), and the reference's forward through
  torch.compile (torch.compile's twin). The worker times the twin interleaved with the
  baselines, in the same rounds, so the host's speed is the same on both sides: the twin /
  baseline ratio, median over the workers, should be within 3% of 1 (median over tasks),
  every task within 5%. This is the check the host allows: on the device's virtual
  machines a launch-bound loop's speed drifts by up to 40% from one second to the next in
  one process (EfficientNetB0's eager forward in consecutive 0.5 s plain loops: 3.41, 5.51,
  4.65 ms), and only callables interleaved call block by call block see the same host.
- **Plain loops in the same worker.** Each worker also times eager and torch.compile alone
  in plain loops just before and after its rounds (``KFORGE_PLAIN_CHECK=1``): in-worker /
  mean of the two. A callable that the interleaving itself slowed (its code cold in the
  CPU's caches after another callable ran) shows here and not in the twin check, since both
  twins would be slowed alike; but the plain loops run seconds apart from the rounds, so
  on a drifting host this ratio is only as good as the drift (median over many tasks).

The plain loop in this process is printed beside them: a launch-bound loop is not
reproducible between processes either (docs/log/2026-11-23-timing-vcpus-and-blocks.md).

With ``--load N`` each task is evaluated twice more with N busy processes on the host, as a
batch's own background work (nvcc, Inductor compile pools, other GPUs' workers) would be:
started the way kforge starts its workers with ``KFORGE_TIMING_CPUS=auto`` (off the cores
reserved for timing, tools/quiet.py), and once with the reservation off (the default). The plain loops run on an idle host.

    python bench/bench_fidelity.py KERNELBENCH_DIR [--per-level 7]
    python bench/bench_fidelity.py KERNELBENCH_DIR --launch-bound [--tasks 3/20,3/21] [--load 32] [--no-own]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import header, kernelbench_tasks, print_table
from kforge.tools.evaluate import EvalOptions, evaluate, measure_baseline
from kforge.tools.guards import set_precision_flags
from kforge.tools.quiet import ENV, background_cpus, stop_compile_pools, timing_env
from kforge.tools.task import import_file, load_task
from kforge.tools.timing import PLAIN_CHECK


def plain_eager_ms(task_file: Path, trials: int = 100, compiled: bool = False) -> float:
    """The simplest honest measurement: flush L2, event, call, event, synchronize (of
    torch.compile(Model) with ``compiled``)."""
    set_precision_flags("fp32")
    module = import_file(task_file, f"plain_{task_file.stem}")
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).cuda()
    fn = torch.compile(model) if compiled else model
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    flush = torch.empty(
        2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.int8, device="cuda"
    )
    samples = []
    with torch.no_grad():
        for _ in range(3):
            fn(*inputs)
        torch.cuda.synchronize()
        stop_compile_pools()  # torch.compile's worker pool warms up (imports) in the background
        for _ in range(trials):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*inputs)
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
    del model, fn, inputs, flush
    torch.cuda.empty_cache()
    return statistics.median(samples)


def reference_as_candidate(task_file: Path) -> str:
    """The task's own source with Model renamed ModelNew: an honest torch-only candidate, the
    eager baseline's twin."""
    return re.sub(r"\bModel\b", "ModelNew", task_file.read_text())


COMPILED_TWIN = """

class ModelNew(_Reference):
    \"\"\"The reference's forward through torch.compile: the torch.compile baseline's twin.\"\"\"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.compiled_forward = torch.compile(super().forward)

    def forward(self, *args):
        return self.compiled_forward(*args)
"""


def compiled_as_candidate(task_file: Path) -> str:
    """The task's own source, its Model renamed, and a ModelNew that runs it through
    torch.compile (same parameter names, so the verifier gives both the same weights)."""
    return re.sub(r"\bModel\b", "_Reference", task_file.read_text()) + COMPILED_TWIN


@contextlib.contextmanager
def host_load(processes: int, reserve: bool):
    """``processes`` busy loops, started as kforge starts its workers (``reserve``: off the
    cores kept for timing); with ``reserve`` False the reservation is off for kforge too."""
    saved = os.environ.get(ENV)
    os.environ[ENV] = "auto" if reserve else "off"
    cpus = background_cpus(timing_env("cuda", "0")) if reserve else None
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        for _ in range(processes)
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        if saved is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = saved


def host_line(result) -> str:
    return next((line for line in result.log.splitlines() if line.startswith("timing host")), "-")


def worker_plain_ms(result) -> dict[str, float]:
    """The worker's own plain loops (KFORGE_PLAIN_CHECK=1), before and after its rounds, averaged."""
    line = next(line for line in result.log.splitlines() if line.startswith("plain loops before"))
    found: dict[str, list[float]] = {}
    for name, ms in re.findall(r"(\w+) (\d+\.\d+)", line):
        found.setdefault(name, []).append(float(ms))
    return {name: statistics.mean(values) for name, values in found.items()}


def launch_bound(
    kernelbench: Path, tasks: str, options: EvalOptions, load: int, repeat: int, own: bool = True
) -> None:
    """Eager and torch.compile timed beside a candidate in kforge's worker: against their
    twins in the same rounds, against plain loops in the same worker, and in this process."""
    files = sorted((Path(__file__).parent / "tasks").glob("*.py")) if own else []
    for item in filter(None, tasks.split(",")):
        level, number = item.split("/")
        files += [f for f in kernelbench_tasks(kernelbench, int(level)) if f.name.split("_")[0] == number]
    arms = [("idle host", 0, False)]
    if load:
        arms += [(f"{load} busy, reserved core", load, True), (f"{load} busy, no reservation", load, False)]
    os.environ[PLAIN_CHECK] = "1"
    twins = {"eager": reference_as_candidate, "compile": compiled_as_candidate}
    rows: list[tuple] = []
    ratios: dict[str, dict[str, list[float]]] = {arm: {"twin": [], "plain": []} for arm, _, _ in arms}
    for task_file in files:
        here = {"eager": plain_eager_ms(task_file), "compile": plain_eager_ms(task_file, compiled=True)}
        for arm, processes, reserve in arms:
            runs: dict[str, list] = {name: [] for name in twins}
            for _ in range(repeat if not processes else 1):
                for name, twin in twins.items():
                    with host_load(processes, reserve):
                        result = evaluate(load_task(task_file), twin(task_file), options)
                    if result.candidate_ms is None or getattr(result, f"{name}_ms") is None:
                        print(
                            f"{task_file.stem}: the {name} twin or its baseline failed, left out:\n{result.log[-1500:]}"
                        )
                        continue
                    print(task_file.stem, arm, f"{name} twin", host_line(result), flush=True)
                    runs[name].append(result)
            for name, results in runs.items():
                if not results:
                    continue
                timed = [getattr(r, f"{name}_ms") for r in results]
                twin_pairs = [r.candidate_ms / t for r, t in zip(results, timed, strict=True)]
                plain_pairs = [t / worker_plain_ms(r)[name] for r, t in zip(results, timed, strict=True)]
                ratios[arm]["twin"].append(statistics.median(twin_pairs))
                ratios[arm]["plain"].append(statistics.median(plain_pairs))
                rows.append(
                    (
                        task_file.stem,
                        arm,
                        name,
                        statistics.median(timed),
                        " ".join(f"{r:.3f}" for r in twin_pairs),
                        statistics.median(twin_pairs),
                        " ".join(f"{r:.3f}" for r in plain_pairs),
                        statistics.median(plain_pairs),
                        here[name],
                        statistics.median(timed) / here[name],
                    )
                )
                print(rows[-1], flush=True)
    print_table(
        "eager and torch.compile beside a candidate (kforge worker): twin in the same rounds, plain loops",
        [
            "task",
            "host",
            "callable",
            "in-worker ms",
            "twin / it, per worker",
            "median",
            "it / worker's plain loops",
            "median",
            "plain ms here",
            "in-worker / here",
        ],
        rows,
    )
    for arm, kinds in ratios.items():
        for kind, values in kinds.items():
            print(
                f"{arm}, {kind}: ratios {len(values)}  median {statistics.median(values):.4f}  "
                f"min {min(values):.3f}  max {max(values):.3f}  within 5%: "
                f"{sum(abs(r - 1) <= 0.05 for r in values)}  within 3%: {sum(abs(r - 1) <= 0.03 for r in values)}"
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kernelbench", type=Path)
    parser.add_argument("--per-level", type=int, default=7)
    parser.add_argument("--skip", type=int, default=0, help="skip the first N tasks of the selection")
    parser.add_argument("--launch-bound", action="store_true", help="time beside a candidate (see above)")
    parser.add_argument("--tasks", default="3/20,3/21", help="with --launch-bound: KernelBench level/problem")
    parser.add_argument(
        "--load", type=int, default=0, help="with --launch-bound: also under N busy processes"
    )
    parser.add_argument("--repeat", type=int, default=3, help="with --launch-bound: workers per task")
    parser.add_argument(
        "--no-own", action="store_true", help="with --launch-bound: the --tasks alone, not bench/tasks"
    )
    args = parser.parse_args()
    if args.launch_bound:
        print(header(" ".join(sys.argv)))
        launch_bound(
            args.kernelbench,
            args.tasks,
            EvalOptions(device="cuda", cache_dir=Path(tempfile.mkdtemp())),
            args.load,
            args.repeat,
            own=not args.no_own,
        )
        return
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
