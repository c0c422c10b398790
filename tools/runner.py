"""What a worker process does with one job: load the task and the candidate, verify,
check for cheats, time against eager and torch.compile, and place it on the roofline.
Runs only inside a worker (see :mod:`kforge.tools.worker`)."""

from __future__ import annotations

import contextlib
import inspect
import os
import random
import time
import traceback
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.utils.cpp_extension as cpp_extension

from .guards import (
    PrecisionGuard,
    ReferenceGuard,
    SizeGuard,
    ThreadGuard,
    TimerGuard,
    run_guarded,
    set_precision_flags,
)
from .hardware import detect_gpu
from .memory import MB, MemoryMeter
from .precision import get_precision
from .quiet import BUSY_HOST_FLAG, HostLoad, quiet_timing
from .result import Result, Roofline, Status, Timing
from .roofline import roofline, tensor_bytes
from .task import import_file
from .timing import PLAIN_CHECK, InputSwitcher, Timer
from .verify import Trial, Verifier, own_storage

SUSPICIOUS_SPEEDUP = 10.0


class BuildError(RuntimeError):
    """A candidate's extension failed to compile."""


@contextlib.contextmanager
def build_errors_marked() -> Iterator[None]:
    """Mark exceptions raised inside torch's extension builders as build errors, so a
    failed nvcc run is told apart from a candidate that raises for another reason."""
    originals = {name: getattr(cpp_extension, name) for name in ("load_inline", "load")}

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as err:  # any failure inside the builder is a build failure
                raise BuildError(f"{type(err).__name__}: {err}") from err

        return wrapped

    for name, fn in originals.items():
        setattr(cpp_extension, name, wrap(fn))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(cpp_extension, name, fn)


def load_candidate(path: Path) -> types.ModuleType:
    with build_errors_marked():
        return import_file(path, "kforge_candidate")


class Job:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.device = torch.device("cuda", 0) if spec["device"] == "cuda" else torch.device("cpu")
        self.precision = get_precision(spec["precision"])
        self.log: list[str] = []
        self.phases: dict[str, float] = {}
        self.timed_output: Any = None
        self.timed_inputs: Any = None
        self.meter: MemoryMeter | None = None  # started where the evaluation's tensors begin
        self.host_load: HostLoad | None = None  # how busy the host was while timing

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase of the job; the times end up in the log (where evaluation time goes)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - start

    def note(self, line: str) -> None:
        self.log.append(line)
        print(line, flush=True)

    def result(self, status: Status, **fields: Any) -> Result:
        if self.phases:
            self.note("phases: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.phases.items()))
        if self.meter is not None:
            fields.setdefault("peak_memory_mb", self.meter.peak_mb())
        if self.host_load is not None and self.host_load.busy and self.device.type == "cuda":
            fields["flags"] = [*fields.get("flags", []), BUSY_HOST_FLAG]
        return Result(
            status=status,
            precision=self.precision.name,
            device=self.device.type,
            backend=self.spec.get("backend", "unknown"),
            source_hash=self.spec.get("source_hash", ""),
            log="\n".join(self.log + ([fields.pop("log")] if "log" in fields else [])),
            **fields,
        )


def run_compile(spec: dict[str, Any]) -> dict[str, Any]:
    """Compile-only: import the candidate on the CPU so its extension is built and cached."""
    try:
        load_candidate(Path(spec["candidate_path"]))
    except BuildError as err:
        return {"status": Status.COMPILE_ERROR.value, "log": _short_trace(err)}
    except BaseException as err:  # anything else surfaces again, with a GPU, in the eval worker
        return {"status": "ok", "log": f"imported with errors after building: {type(err).__name__}: {err}"}
    return {"status": "ok", "log": ""}


def run_eval(spec: dict[str, Any]) -> Result:
    job = Job(spec)
    set_precision_flags(job.precision.name)
    job.note(f"network: {network_state()}")
    timers, precision_guard = TimerGuard(), PrecisionGuard()
    task = import_file(Path(spec["task_path"]), "kforge_task")
    sizes = SizeGuard(task)
    reference_guard = ReferenceGuard(task.Model)
    candidate_path = Path(spec["candidate_path"])
    threads = ThreadGuard(str(candidate_path))
    try:
        with job.phase("import"):
            module = load_candidate(candidate_path)
    except BuildError as err:
        return job.result(Status.COMPILE_ERROR, log=_short_trace(err))
    except Exception as err:
        return job.result(Status.RUNTIME_ERROR, log="candidate raises at import:\n" + _short_trace(err))
    model_new = getattr(module, "ModelNew", None)
    if not isinstance(model_new, type) or not issubclass(model_new, torch.nn.Module):
        return job.result(Status.FORMAT_ERROR, log="ModelNew is not a torch.nn.Module subclass")
    try:
        inspect.signature(model_new).bind(*task.get_init_inputs())
    except TypeError as err:
        return job.result(
            Status.FORMAT_ERROR, log=f"ModelNew's constructor does not take Model's arguments: {err}"
        )

    def guard_violations() -> list[str]:
        found = timers.violations() + precision_guard.violations() + sizes.violations()
        return found + reference_guard.violations() + threads.violations()

    verifier = Verifier(task, model_new, job.device, job.precision, threads, reference_guard)
    job.meter = verifier.meter = MemoryMeter(job.device)
    try:
        with job.phase("verify"):
            verdict = verifier.run(spec["trials"], spec["seed"])
    except Exception as err:
        return job.result(Status.RUNTIME_ERROR, log=_short_trace(err), **verifier.memory_figures())
    errors = verifier.memory_figures() | dict(
        trials=verdict.trials,
        max_abs_err=verdict.max_abs_err,
        max_rel_err=verdict.max_rel_err,
        fp64_rel_err=verdict.fp64_rel_err,
        ref_fp64_rel_err=verdict.ref_fp64_rel_err,
    )
    cheats = list(dict.fromkeys(verdict.cheats + guard_violations()))
    if cheats:
        return job.result(Status.REJECTED, cheats=cheats, log=verdict.message, **errors)
    if not verdict.correct or verifier.last is None:
        return job.result(Status.INCORRECT, log=verdict.message, **errors)

    trial = verifier.last
    timer = Timer(job.device, spec["timing_trials"])
    try:
        with job.phase("timing"):
            timings, stale, escaped_ms = time_candidate(job, timer, verifier, trial, threads, reference_guard)
    except Exception as err:
        return job.result(Status.RUNTIME_ERROR, log="while timing:\n" + _short_trace(err), **errors)
    cand_timing = timings["candidate"]
    cheats = guard_violations()
    if stale:
        cheats.append(f"what was timed is not what was verified (stale or cached results): {stale}")
    if escaped_ms > max(0.05, 0.5 * cand_timing.median_ms):
        cheats.append(
            f"work the timer misses: the device stays busy {escaped_ms:.3f} ms after the caller's stream "
            f"finished (timed: {cand_timing.median_ms:.3f} ms): a side stream or thread"
        )
    gpu = detect_gpu() if job.device.type == "cuda" else None
    known = spec.get("roofline")  # the task's, measured by an earlier worker
    with torch.no_grad(), job.phase("roofline"):
        roof = (
            Roofline(**known) if known else roofline(trial.reference, trial.inputs, gpu, job.precision.name)
        )
    result = job.result(
        Status.REJECTED if cheats else Status.OK,
        correct=True,
        flags=list(dict.fromkeys(verdict.notes)),
        cheats=cheats,
        candidate=cand_timing,
        eager=timings["eager"],
        compiled=timings.get("compile"),
        roofline=roof,
        timing_label=timer.label,
        **errors,
    )
    if (result.roofline_fraction or 0) > 1:
        result.flags.append(
            "faster than the roofline floor of the reference's algorithm at this precision's peak: the "
            "candidate does fewer FLOPs (an algebraic shortcut) or uses tensor cores at fp32 accuracy (3xTF32)"
        )
    if not cheats and (result.speedup_vs_eager or 0) > SUSPICIOUS_SPEEDUP:
        strict_recheck(job, verifier, result, spec)
    return result


def strict_recheck(job: Job, verifier: Verifier, result: Result, spec: dict[str, Any]) -> None:
    """A speedup over 10x gets three times the trials on new seeds before it is believed."""
    verdict = verifier.run(3 * spec["trials"], spec["seed"] + 104729)
    if verdict.cheats or not verdict.correct:
        result.status = Status.REJECTED
        result.cheats += verdict.cheats or [f"failed the strict recheck of a >10x speedup: {verdict.message}"]
    else:
        result.flags.append(f"speedup over {SUSPICIOUS_SPEEDUP:.0f}x: passed the strict recheck")


def time_candidate(
    job: Job,
    timer: Timer,
    verifier: Verifier,
    trial: Trial,
    threads: ThreadGuard,
    reference_guard: ReferenceGuard,
) -> tuple[dict[str, Timing], str, float]:
    """The candidate timed against eager and torch.compile on the last verified trial:
    (timings, what differs when the last timed output is rechecked, the device time the
    timer misses). The two extra input sets and the kept output are gone on return."""
    # Inside the timed region the candidate gets only what eager gets (no_grad) plus the
    # reference guard's flag; the thread guard walks every thread's frames, which costs host
    # time that would be charged to the candidate, so it watches the side-stream probe after.
    timed_fn = _no_grad(lambda: _armed_call(reference_guard, lambda: trial.candidate(*trial.inputs)))
    cand_fn = _no_grad(lambda: run_guarded(lambda: trial.candidate(*trial.inputs), threads, reference_guard))
    switcher = InputSwitcher(trial.inputs, verifier.fresh_inputs(), verifier.fresh_inputs())
    timings = time_all(
        job, timer, trial.reference, trial.inputs, timed_fn, job.spec["compile_baseline"], switcher
    )
    # Rechecked before the candidate runs again: its later calls cannot touch what it returned.
    stale = verifier.recheck(job.timed_output, trial.reference, job.timed_inputs)
    job.timed_output = job.timed_inputs = None
    return timings, stale, timer.escaped_ms(cand_fn)


def time_all(
    job: Job,
    timer: Timer,
    reference: torch.nn.Module,
    inputs: list[Any],
    cand_fn: Callable[[], Any],
    compile_baseline: bool,
    switcher: InputSwitcher | None = None,
) -> dict[str, Timing]:
    """Candidate, eager and torch.compile timed in this worker, interleaved (each round runs
    each in a block, from a random first order). The candidate's last timed output and the inputs
    it got are kept in ``job.timed_output`` and ``job.timed_inputs``, without copies: the
    output is the candidate's own (no candidate call follows the last round), and the inputs'
    values are the switcher's current set, which nothing writes."""
    entries: dict[str, Callable[[], Any]] = {
        "candidate": cand_fn,
        "eager": _no_grad(lambda: reference(*inputs)),
    }
    if compile_baseline:
        compiled = torch.compile(reference)
        try:
            with job.phase("torch.compile"):
                _no_grad(lambda: compiled(*inputs))()
            entries["compile"] = _no_grad(lambda: compiled(*inputs))
        except Exception as err:  # the baseline failing is not the candidate's failure
            job.note(f"torch.compile baseline failed: {type(err).__name__}: {err}")
    order = list(entries)
    random.Random(job.spec["seed"]).shuffle(order)
    job.note(f"timing: interleaved rounds, first order {', '.join(order)} ({timer.label})")

    def keep(name: str, output: Any) -> None:  # the candidate's last timed output and its inputs
        if name == "candidate":
            job.timed_output = own_storage(output, inputs)  # the reference may write to the inputs
            job.timed_inputs = switcher.current() if switcher is not None else inputs

    # Only the candidate's runs switch the input values: its consecutive calls always see
    # different values, whatever ran in between.
    entries = {name: entries[name] for name in order}
    plain = {name: fn for name, fn in entries.items() if name != "candidate"}
    check = os.environ.get(PLAIN_CHECK) == "1"  # bench_fidelity.py's reference, this process
    with quiet_timing() as job.host_load:
        before = timer.plain_loops(plain) if check else ""
        timings = timer.time_many(entries, before_each={"candidate": switcher}, on_last=keep)
        if check:
            job.note(f"plain loops before the rounds: {before}; after: {timer.plain_loops(plain)}")
    job.note(job.host_load.line())
    return timings


def run_baseline(spec: dict[str, Any]) -> Result:
    """The reference measured against itself: eager and torch.compile times and the roofline."""
    job = Job(spec)
    set_precision_flags(job.precision.name)
    task = import_file(Path(spec["task_path"]), "kforge_task")
    with torch.device(job.device):
        torch.manual_seed(spec["seed"])
        reference = task.Model(*task.get_init_inputs()).to(job.device)
        inputs = [x.to(job.device) if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    job.meter = MemoryMeter(job.device)
    timer = Timer(job.device, spec["timing_trials"])
    eager_fn = _no_grad(lambda: reference(*inputs))
    timings = time_all(job, timer, reference, inputs, eager_fn, spec["compile_baseline"])
    gpu = detect_gpu() if job.device.type == "cuda" else None
    with torch.no_grad():
        roof = roofline(reference, inputs, gpu, job.precision.name)
    return job.result(
        Status.OK,
        correct=True,
        inputs_mb=tensor_bytes(inputs) / MB,
        candidate=timings["candidate"],
        eager=timings["eager"],
        compiled=timings.get("compile"),
        roofline=roof,
        timing_label=timer.label,
    )


def run_forward(spec: dict[str, Any]) -> None:
    """Run the candidate's forward a few times: the program that ncu and compute-sanitizer watch."""
    task = import_file(Path(spec["task_path"]), "kforge_task")
    module = load_candidate(Path(spec["candidate_path"]))
    device = torch.device("cuda", 0)
    with torch.device(device):
        torch.manual_seed(spec["seed"])
        model = module.ModelNew(*task.get_init_inputs()).to(device)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    with torch.no_grad():
        model(*inputs)  # warm-up: compilation and autotuning stay out of the profile
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("kforge_profile")
        for _ in range(spec.get("repeats", 1)):
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


def network_state() -> str:
    try:
        names = [line.split(":")[0].strip() for line in Path("/proc/net/dev").read_text().splitlines()[2:]]
    except OSError:
        return "unknown"
    return "isolated" if names == ["lo"] else "shared (no network namespace available)"


def _armed_call(guard: ReferenceGuard, fn: Callable[[], Any]) -> Any:
    with guard.armed():
        return fn()


def _no_grad(fn: Callable[[], Any]) -> Callable[[], Any]:
    def wrapped() -> Any:
        with torch.no_grad():
            return fn()

    return wrapped


def _short_trace(err: BaseException, max_chars: int = 6000) -> str:
    text = "".join(traceback.format_exception(err))
    return text[-max_chars:]
