"""Evaluate candidates: compile (CPU pool, cached by source hash), then verify and time each
one in its own sandboxed worker process. The public entry points are :func:`evaluate` and
:func:`evaluate_many`; everything they return is a :class:`Result`."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

from .result import Result
from .task import Task


def default_cache_dir() -> Path:
    root = os.environ.get("KFORGE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kforge"
    )
    return Path(root)


@dataclasses.dataclass(kw_only=True)
class EvalOptions:
    device: str = "cuda"  # "cuda" or "cpu" (cpu: Triton under TRITON_INTERPRET=1, timings labelled CPU)
    gpu_index: int = 0  # which visible GPU the worker uses
    precision: str = "fp32"  # precision class the candidate is checked under
    trials: int = 5  # correctness trials, each with fresh inputs and weights
    timing_trials: int = 100  # timed runs per callable (fewer on the CPU)
    timeout_s: float = 300.0  # wall-clock limit of one worker
    memory_limit_gb: float = 32.0  # host memory limit of one worker
    compile_baseline: bool = True  # also time torch.compile(Model) in the same worker
    ncu: bool = False  # add Nsight Compute metrics when ncu is present
    sanitize: bool = False  # run compute-sanitizer memcheck and racecheck
    seed: int = 0
    cache_dir: Path = dataclasses.field(default_factory=default_cache_dir)


ResultCallback = Callable[[int, Result], None]
