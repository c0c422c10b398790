"""Evaluate candidates: compile (CPU pool, cached by source hash), then verify and time each
one in its own sandboxed worker process. The public entry points are :func:`evaluate`,
:func:`evaluate_many` and :func:`measure_baseline`; everything they return is a
:class:`Result`."""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import profile
from .cache import default_cache_dir
from .fingerprint import COPY_BYTES
from .hardware import cuda_arch_list
from .phases import phases_shown, stopped_where
from .quiet import timing_env
from .result import Result, Roofline, Status
from .sandbox import Limits, Pair, WorkerOutcome, clean_env, run_pair, run_worker
from .static_checks import static_cheats
from .task import Candidate, Task, TaskError, parse_candidate


@dataclasses.dataclass(kw_only=True)
class EvalOptions:
    device: str = "cuda"  # "cuda" or "cpu" (cpu: Triton under TRITON_INTERPRET=1, timings labelled CPU)
    gpu_index: int = 0  # which visible GPU the worker uses
    precision: str = "fp32"  # precision class the candidate is checked under
    trials: int = 5  # correctness trials, each with fresh inputs and weights
    timing_trials: int = 100  # timed runs per callable (fewer on the CPU)
    timeout_s: float = 300.0  # wall-clock limit of one worker
    memory_limit_gb: float = dataclasses.field(default_factory=lambda: default_memory_gb())  # per worker
    compile_baseline: bool = True  # also time torch.compile(Model) in the same worker
    # inputs over this: timed lean (timing.InputSwitcher), fewer trials (verify.BIG_INPUT_SHARE)
    lean_bytes: int = COPY_BYTES
    ncu: bool = False  # add Nsight Compute metrics when ncu is present
    sanitize: bool = False  # run compute-sanitizer memcheck and racecheck
    seed: int = 0
    compile_workers: int = 2  # CPU processes building CUDA extensions ahead of the GPU
    cache_dir: Path = dataclasses.field(default_factory=default_cache_dir)
    extra_writable: tuple[Path, ...] = ()  # folders workers may write besides their own (none by default)


ResultCallback = Callable[[int, Result], None]
# (candidate index, what it is doing): "compiling" (a CUDA build), "loading", "verifying", "timing"
PhaseCallback = Callable[[int, str], None]

WORKER_MEMORY_SHARE = 0.4  # of the host's memory, per worker: an evaluation runs two (judge, candidate)
COMPILE_SHARE = 0.7  # of the worker's time, for torch.compile of the reference (DIEN's took 156 of 300 s)


def default_memory_gb() -> float:
    """Each worker's host-memory limit: 40% of this host's memory (two workers an evaluation
    stay under it with room for kforge), so the limit acts before the kernel's OOM killer. GPU
    tasks draw their inputs on the device and need little host memory beyond torch itself."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 16.0
    return max(2.0, round(WORKER_MEMORY_SHARE * pages * size / 2**30, 1))


# The reference's roofline is the same for every candidate of a task: the first worker that
# gets that far measures it (a flop-counted forward, and about 2 s of imports the first time
# in a process), the later ones of this process are handed it.
_ROOFLINES: dict[tuple[str, str, str, int], Roofline] = {}


def _roofline_key(task: Task, options: EvalOptions) -> tuple[str, str, str, int]:
    return (task.hash, options.precision, options.device, options.gpu_index)


def _remember_roofline(task: Task, options: EvalOptions, result: Result) -> Result:
    if result.roofline is not None:
        _ROOFLINES.setdefault(_roofline_key(task, options), result.roofline)
    return result


class EvalError(ValueError):
    """Bad input to the evaluator (one line, says what to do)."""


def check_runnable(candidate: Candidate, options: EvalOptions) -> None:
    if options.device == "cpu" and candidate.backend in ("cuda", "cupy"):
        raise EvalError(
            f"a {candidate.backend} candidate needs a GPU: run with --device cuda on a machine with one"
        )
    if options.device not in ("cuda", "cpu"):
        raise EvalError(f"unknown device {options.device!r}: use cuda or cpu")


def evaluate(task: Task, source: str, options: EvalOptions) -> Result:
    """Evaluate one candidate source against ``task``."""
    return evaluate_many(task, [source], options)[0]


def evaluate_many(
    task: Task,
    sources: list[str],
    options: EvalOptions,
    on_result: ResultCallback | None = None,
    on_phase: PhaseCallback | None = None,
) -> list[Result]:
    """Evaluate several candidates: CUDA builds start at once in a CPU pool, and each
    candidate is verified and timed on the GPU as soon as its build is done, one at a time.
    ``on_phase`` hears what the candidate being evaluated is doing, as it changes."""
    prepared: list[Candidate | Result] = [_prepare(task, s, options) for s in sources]
    results: list[Result] = []
    with ThreadPoolExecutor(max_workers=max(1, options.compile_workers)) as pool:
        builds: list[Future[Result | None] | None] = [
            pool.submit(build, c, options) if isinstance(c, Candidate) else None for c in prepared
        ]
        for i, item in enumerate(prepared):
            if isinstance(item, Result):
                result = item
            else:
                future = builds[i]
                shown = functools.partial(on_phase, i) if on_phase is not None else None
                if shown is not None and future is not None and not future.done():
                    shown("compiling")
                failure = future.result() if future is not None else None
                result = failure or _run_eval(task, item, options, shown)
            results.append(result)
            if on_result is not None:
                on_result(i, result)
    return results


def measure_baseline(task: Task, options: EvalOptions) -> Result:
    """The reference timed against itself: eager and torch.compile times and the roofline."""
    scratch = _scratch(options, task.hash, "baseline")
    env = _env(options, None, "judge")  # the reference alone: the judge's caches
    job = (
        _job("baseline", task, None, options, scratch)
        | _paths(options, env)
        | {"phase_file": str(scratch / "phase")}
    )
    outcome = run_worker(job, scratch, _limits(options), env)
    return _remember_roofline(
        task, options, stopped_where(_to_result(outcome, None, options), scratch / "phase")
    )


def run_model_job(
    job: dict[str, Any], options: EvalOptions, readable: list[Path], writable: list[Path]
) -> dict[str, Any]:
    """A ``kforge model`` job (:mod:`.model.job`) in a contained worker: the user's model code
    runs there, reading ``readable`` (its folder) and writing ``writable`` (the output folder).
    The worker's payload, or ``{"error": ...}`` with its log's tail when it wrote none."""
    scratch = _scratch(options, job["mode"], "model")
    env = _env(options, None, "judge")
    paths = _paths(options, env)
    base = {"device": options.device, "precision": options.precision, "seed": options.seed}
    full = (
        base
        | job
        | {
            "writable": paths["writable"] + [str(p) for p in writable],
            "readable": paths["readable"] + [str(p) for p in readable],
        }
    )
    outcome = run_worker(full, scratch, _limits(options), env)
    if outcome.result is None:
        return {"error": f"the model worker {outcome.crash_reason}", "log": outcome.log}
    return outcome.result


def build(candidate: Candidate, options: EvalOptions) -> Result | None:
    """Build a CUDA candidate's extension on the CPU (cached by source hash).
    None when built (or nothing to build); a compile_error Result otherwise."""
    if candidate.backend != "cuda":
        return None
    ext_dir = options.cache_dir / "ext" / candidate.hash
    marker = ext_dir / ".built"
    if marker.exists():
        return None
    scratch = _scratch(options, candidate.hash, "build")
    env = _env(options, candidate)
    env["CUDA_VISIBLE_DEVICES"] = ""  # compile only: leave the GPU to the evaluations
    job = _job("compile", None, candidate, options, scratch) | _paths(options, env)
    outcome = run_worker(job, scratch, _limits(options), env)
    if outcome.result is not None and outcome.result.get("status") == "ok":
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(outcome.result.get("log", ""))
        return None
    if outcome.result is not None:
        log = outcome.result.get("log", "")
    else:
        log = f"compile worker {outcome.crash_reason}\n{outcome.log}"
    status = Status.TIMEOUT if outcome.timed_out else Status.COMPILE_ERROR
    return Result(
        status=status,
        backend="cuda",
        precision=options.precision,
        device=options.device,
        log=log,
        source_hash=candidate.hash,
    )


def _prepare(task: Task, source: str, options: EvalOptions) -> Candidate | Result:
    """Parse and statically check a candidate: a Result when it ends here."""
    try:
        candidate = parse_candidate(source)
    except TaskError as err:
        return Result(
            status=Status.FORMAT_ERROR, precision=options.precision, device=options.device, log=str(err)
        )
    check_runnable(candidate, options)
    cheats = static_cheats(source, task.source, options.precision)
    if cheats:
        return Result(
            status=Status.REJECTED,
            backend=candidate.backend,
            precision=options.precision,
            device=options.device,
            cheats=cheats,
            source_hash=candidate.hash,
        )
    return candidate


def _run_eval(
    task: Task, candidate: Candidate, options: EvalOptions, on_phase: Callable[[str], None] | None = None
) -> Result:
    """The judge (a worker that loads the task, never the candidate) and the candidate's
    worker, joined by pipes; the Result is the judge's alone."""
    scratch = _scratch(options, candidate.hash, "eval")
    judge_dir, cand_dir = scratch / "judge", scratch / "candidate"
    cand_job = _job("eval", None, candidate, options, cand_dir)
    judge_job = _job("eval", task, None, options, judge_dir) | {"backend": candidate.backend}
    judge_job["source_hash"] = candidate.hash
    known = _ROOFLINES.get(_roofline_key(task, options))
    if known is not None:
        judge_job["roofline"] = dataclasses.asdict(known)
    judge_env, cand_env = _env(options, None, "judge"), _env(options, candidate)
    judge_job |= _paths(options, judge_env)
    cand_job |= _paths(options, cand_env)
    judge_job["phase_file"] = str(judge_dir / "phase")
    pair = Pair(judge_job, cand_job, judge_dir, cand_dir, judge_env, cand_env)
    with phases_shown(judge_dir / "phase", on_phase):
        judge, worker = run_pair(pair, _limits(options))
    result = stopped_where(_to_result(judge, candidate, options, worker), judge_dir / "phase")
    result = _remember_roofline(task, options, result)
    if options.device == "cuda" and result.status == Status.OK and (options.ncu or options.sanitize):
        env = _env(options, candidate)
        forward = _job("forward", task, candidate, options, scratch) | {"repeats": 1} | _paths(options, env)

        def run_forward(prefix: list[str]) -> WorkerOutcome:
            return run_worker(forward, scratch, _limits(options), env, prefix=prefix)

        if options.ncu:
            result.ncu = profile.ncu_metrics(run_forward, scratch)
        if options.sanitize:
            result.sanitizer = profile.sanitize(run_forward)
    shutil.rmtree(scratch, ignore_errors=True)
    return result


def _to_result(
    outcome: WorkerOutcome,
    candidate: Candidate | None,
    options: EvalOptions,
    worker: WorkerOutcome | None = None,
) -> Result:
    """The judge's Result; where the candidate's worker crashed, how, with its log's tail."""
    backend = candidate.backend if candidate else "torch-only"
    ended = _worker_end(worker)
    if outcome.result is not None:
        result = Result.from_json(outcome.result)
        if ended:
            result.log = f"{result.log}\n{ended}".strip()
        return result
    status = Status.TIMEOUT if outcome.timed_out else Status.RUNTIME_ERROR
    return Result(
        status=status,
        backend=backend,
        precision=options.precision,
        device=options.device,
        log=f"worker {outcome.crash_reason} after {outcome.elapsed_s:.1f} s\n{outcome.log}\n{ended}".strip(),
        source_hash=candidate.hash if candidate else "",
    )


def _worker_end(worker: WorkerOutcome | None) -> str:
    """How the candidate's worker ended, when that matters, with the tail of its log."""
    if worker is None:
        return ""
    crashed = worker.timed_out or worker.out_of_memory or worker.returncode not in (0, None)
    head = f"candidate worker {worker.crash_reason}" if crashed else "candidate worker log"
    return f"{head}:\n{worker.log}" if crashed or worker.log.strip() else ""


def _job(
    mode: str, task: Task | None, candidate: Candidate | None, options: EvalOptions, scratch: Path
) -> dict[str, Any]:
    job: dict[str, Any] = {
        "mode": mode,
        "device": options.device,
        "precision": options.precision,
        "trials": options.trials,
        "timing_trials": options.timing_trials,
        "compile_baseline": options.compile_baseline,
        "compile_limit_s": options.timeout_s * COMPILE_SHARE,
        "lean_bytes": options.lean_bytes,
        "seed": options.seed,
    }
    scratch.mkdir(parents=True, exist_ok=True)
    if task is not None:  # a copy: nothing a worker does reaches the user's own file
        copy = scratch / "task.py"
        copy.write_text(task.source)
        job["task_path"] = str(copy)
    if candidate is not None:
        path = scratch / "candidate.py"
        path.write_text(candidate.source)
        job |= {"candidate_path": str(path), "backend": candidate.backend, "source_hash": candidate.hash}
    return job


CACHE_VARIABLES = (
    "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR",
    "PYTHONPYCACHEPREFIX",
    "TORCH_EXTENSIONS_DIR",
)


def _paths(options: EvalOptions, env: dict[str, str]) -> dict[str, list[str]]:
    """What a worker with ``env`` may write besides its job folder (the caches its environment
    names, created here: a Landlock rule needs a path that exists) and read besides the system's
    (the whole cache folder: a candidate's built extension, the bytecode)."""
    writable = [env[name] for name in CACHE_VARIABLES if env.get(name)]
    for path in writable:
        Path(path).mkdir(parents=True, exist_ok=True)
    writable += [str(path) for path in options.extra_writable]
    return {"writable": writable, "readable": [str(options.cache_dir)]}


def _scratch(options: EvalOptions, key: str, kind: str) -> Path:
    path = options.cache_dir / "scratch" / f"{kind}-{key}-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _limits(options: EvalOptions) -> Limits:
    return Limits(
        timeout_s=options.timeout_s,
        memory_limit_gb=options.memory_limit_gb,
        limit_address_space=options.device == "cpu",
    )


def _env(options: EvalOptions, candidate: Candidate | None, role: str = "candidate") -> dict[str, str]:
    """A worker's environment. The judge's caches (bytecode, Triton, inductor) are apart from
    the ones candidate workers write: a candidate cannot plant code the judge will load."""
    cache = options.cache_dir / "judge" if role == "judge" else options.cache_dir
    extra = {
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "PYTHONUNBUFFERED": "1",
        # Bytecode of everything a worker imports, kept between workers: where site-packages
        # has no __pycache__ (read-only, or PYTHONDONTWRITEBYTECODE set, as on the device
        # image) each fresh worker would otherwise recompile ~3000 torch modules: 8-10 s.
        "PYTHONPYCACHEPREFIX": str(cache / "pycache"),
        "PYTHONDONTWRITEBYTECODE": "",  # empty: bytecode is written (to the prefix above)
    }
    if candidate is not None:
        extra["TORCH_EXTENSIONS_DIR"] = str(cache / "ext" / candidate.hash)
    if options.device == "cpu":
        extra["TRITON_INTERPRET"] = "1"
        extra["CUDA_VISIBLE_DEVICES"] = ""
    else:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = visible.split(",") if visible else None
        extra["CUDA_VISIBLE_DEVICES"] = ids[options.gpu_index] if ids else str(options.gpu_index)
        arch = cuda_arch_list()
        if arch:
            extra["TORCH_CUDA_ARCH_LIST"] = arch
    extra.update(timing_env(options.device, extra["CUDA_VISIBLE_DEVICES"]))
    return clean_env(extra)
