"""Synthetic-but-realistic trajectories for fitting and testing the ranker before real ones
exist: tasks drawn from KernelBench-like archetypes (launch-bound chains, GEMMs, convolutions,
memory-bound elementwise/reduction chains, algebraic-rewrite patterns), each family's speedup
drawn from what that family does on such a task on an H100 under strict fp32, with noise and
failures. Written through the real store, so training reads them like any recorded run."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

from ...tools.result import Result, Status, Timing
from ...tools.task import Task
from ..store import AttemptRecord, TrajectoryStore
from .features import TaskFeatures
from .ranker_data import features_line

# family -> (log2 speedup mean, spread, failure rate) per archetype; missing = not applicable
ARCHETYPES: dict[str, dict[str, tuple[float, float, float]]] = {
    "launch_bound": {
        "compile-default": (0.4, 0.3, 0.02), "cuda-graph": (1.3, 0.4, 0.1), "compile-reduce-overhead": (1.4, 0.4, 0.08),
        "compile-graph": (1.5, 0.4, 0.1), "compile-max-autotune-no-cudagraphs": (0.3, 0.3, 0.05),
        "compile-max-autotune": (1.3, 0.4, 0.1), "compile-nchw": (0.45, 0.3, 0.02),
    },
    "gemm": {
        "compile-default": (0.02, 0.05, 0.02), "cuda-graph": (0.0, 0.03, 0.02), "compile-reduce-overhead": (0.02, 0.05, 0.05),
        "compile-graph": (0.02, 0.05, 0.05), "compile-max-autotune-no-cudagraphs": (0.08, 0.1, 0.05),
        "compile-max-autotune": (0.08, 0.1, 0.05), "tf32x3-gemm": (0.55, 0.15, 0.05),
    },
    "conv": {
        "compile-default": (0.05, 0.1, 0.02), "cuda-graph": (0.0, 0.03, 0.05), "compile-reduce-overhead": (0.05, 0.1, 0.05),
        "compile-graph": (0.05, 0.1, 0.05), "cudnn-benchmark": (0.4, 0.3, 0.0), "cudnn-compile": (0.5, 0.3, 0.02),
        "channels-last": (0.2, 0.4, 0.05), "compile-max-autotune-no-cudagraphs": (0.1, 0.2, 0.1),
        "compile-max-autotune": (0.1, 0.2, 0.1), "tf32x3-conv": (0.2, 0.15, 0.1),
        # from bench_conv_layout (14 KernelBench conv tasks on an H200,
        # docs/log/2026-11-23-compile-nchw.md): log2 speedup over eager 0.33 mean, 0.22 spread;
        # the shipped model is fit on the batch instead
        "compile-nchw": (0.33, 0.22, 0.02),
    },
    "elementwise": {
        "compile-default": (1.0, 0.4, 0.02), "cuda-graph": (0.05, 0.05, 0.02), "compile-reduce-overhead": (1.0, 0.4, 0.05),
        "compile-graph": (1.0, 0.4, 0.05), "corpus-triton": (0.5, 0.4, 0.1),
    },
    "rewrite": {
        "fx-rewrite": (4.0, 1.0, 0.05), "fx-rewrite-compile": (4.1, 1.0, 0.05), "compile-default": (0.1, 0.1, 0.02),
        "cuda-graph": (0.0, 0.05, 0.02), "compile-reduce-overhead": (0.1, 0.1, 0.05), "compile-graph": (0.1, 0.1, 0.05),
        "compile-max-autotune-no-cudagraphs": (0.1, 0.1, 0.05), "compile-max-autotune": (0.1, 0.1, 0.05),
    },
}  # fmt: skip
FAMILY_STRATEGY = {
    "fx-rewrite": "fx-rewrite[sum-of-linear]",
    "fx-rewrite-compile": "fx-rewrite[sum-of-linear]+compile-default",
    "corpus-triton": "corpus:softmax_triton:bs2048",
    "compile-graph": "compile-default+cuda-graph",
    "cudnn-compile": "cudnn-benchmark+compile-default",
    "channels-last": "cudnn-benchmark+channels-last",
    "compile-nchw": "nchw+compile-default",
}


@dataclasses.dataclass
class SynthTask:
    name: str
    archetype: str
    features: TaskFeatures
    log2_speedups: dict[str, float | None]  # None: the candidate failed


def _features(archetype: str, rng: random.Random) -> TaskFeatures:
    u = rng.uniform
    if archetype == "launch_bound":
        launches = int(10 ** u(1.3, 3.0))
        f = TaskFeatures(
            launches=launches, flops=10 ** u(6, 9), min_bytes=10 ** u(5, 7.5), floor_ms=u(0.001, 0.02)
        )
        f.eager_ms, f.conv_dims = launches * u(0.004, 0.008), rng.choice([0, 0, 2])
        f.ops = {"addmm": 2, "relu": 3} if f.conv_dims == 0 else {"convolution": 4, "relu": 4}
    elif archetype in ("gemm", "rewrite"):
        f = TaskFeatures(
            launches=rng.randint(1, 4), flops=10 ** u(10.5, 12), min_bytes=10 ** u(7.5, 9), bound="compute"
        )
        f.floor_ms, f.ops = f.flops / 67e9, {"mm": 1, "sum": int(archetype == "rewrite")}
        f.eager_ms = f.floor_ms * u(1.1, 1.6)
    elif archetype == "conv":
        f = TaskFeatures(
            launches=rng.randint(2, 40), flops=10 ** u(10, 12), min_bytes=10 ** u(8, 9.5), bound="compute"
        )
        f.floor_ms, f.conv_dims, f.ops = (
            f.flops / 67e9,
            rng.choice([1, 2, 2, 3]),
            {"convolution": 1, "add": 1},
        )
        f.eager_ms = f.floor_ms * u(1.2, 3.0)
    else:
        f = TaskFeatures(launches=rng.randint(2, 12), flops=0.0, min_bytes=10 ** u(8, 10))
        f.floor_ms, f.ops = f.min_bytes / 3.35e9, {"mul": 2, "sigmoid": 1, "sum": rng.randint(0, 1)}
        f.eager_ms = f.floor_ms * f.launches * u(0.6, 1.0)
    f.gpu = "H100-SXM"
    return f


def synth_task(index: int, rng: random.Random) -> SynthTask:
    archetype = rng.choice(list(ARCHETYPES))
    features = _features(archetype, rng)
    table = ARCHETYPES[archetype]
    gain = 0.0 if archetype != "elementwise" else rng.uniform(-0.3, 0.3) * math.log10(1 + features.launches)
    speedups: dict[str, float | None] = {}
    for family, (mean, spread, fail) in table.items():
        if family == "compile-nchw" and features.conv_dims not in (2, 3):
            continue  # the family applies to 2D/3D convolutions only
        speedups[family] = None if rng.random() < fail else rng.gauss(mean + gain, spread)
    compile_log2 = speedups.get("compile-default") or 0.0
    features.compile_ms = (features.eager_ms or 1.0) / (2.0**compile_log2)
    return SynthTask(f"synth_{index:04d}_{archetype}", archetype, features, speedups)


def _result(eager_ms: float, log2_speedup: float | None) -> Result:
    if log2_speedup is None:
        return Result(status=Status.RUNTIME_ERROR, log="synthetic failure")
    ms = eager_ms / (2.0**log2_speedup)
    return Result(
        status=Status.OK,
        correct=True,
        candidate=Timing(ms, ms, ms, 0.0, 10),
        eager=Timing(eager_ms, eager_ms, eager_ms, 0.0, 10),
    )


def write_store(db: Path, tasks: list[SynthTask]) -> None:
    """One run per task in one trajectories.db, as the embedded policy would record them."""
    db.parent.mkdir(parents=True, exist_ok=True)
    store = TrajectoryStore(db)
    for task in tasks:
        run_id = f"{task.name}-synthetic"
        source = f"# synthetic task {task.name} ({task.archetype})\n"
        store.start_run(
            run_id,
            Task(task.name, Path(f"{task.name}.py"), source),
            policy="embedded",
            model=None,
            settings={},
        )
        store.add_analysis(run_id, 0, "plan", f"synthetic plan\n{features_line(task.features)}")
        for idx, (family, value) in enumerate(task.log2_speedups.items()):
            attempt_id = f"r1-c{idx}"
            strategy = FAMILY_STRATEGY.get(family, family)
            store.add_attempt(
                run_id, source_hash(source), AttemptRecord(attempt_id, 1, idx, "# source", strategy)
            )
            store.add_result(run_id, attempt_id, _result(task.features.eager_ms or 1.0, value))
        store.finish_run(run_id, "finished", "synthetic")
    store.close()


def source_hash(source: str) -> str:
    return Task("x", Path("x"), source).hash


def synth_tasks(n: int, seed: int) -> list[SynthTask]:
    rng = random.Random(seed)
    return [synth_task(i, rng) for i in range(n)]
