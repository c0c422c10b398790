"""What a worker process does with a job other than judging a candidate (:mod:`.judge` does
that): build a candidate's extension, measure the reference against itself, run a
candidate's forward under a profiler; and the parts the judge shares (:class:`Job`, the
interleaved timing of eager and torch.compile). Runs only inside a worker
(see :mod:`kforge.tools.worker`)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
import traceback
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.utils.cpp_extension as cpp_extension

from .guards import set_precision_flags
from .hardware import detect_gpu
from .memory import MB, MemoryMeter
from .precision import get_precision
from .quiet import BUSY_HOST_FLAG, HostLoad, quiet_timing
from .result import COMPILE_FAILED, Result, Status, Timing
from .roofline import roofline, tensor_bytes
from .task import import_file
from .timing import PLAIN_CHECK, LocalSlot, Slot, Timer

SUSPICIOUS_SPEEDUP = 10.0


class CompileTimeLimit(BaseException):
    """torch.compile of the reference ran past its share of the worker's time. A BaseException:
    Dynamo turns an Exception raised inside its tracing into a fallback to eager, which would be
    timed as if it were compile's."""


@contextlib.contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Raise CompileTimeLimit in this (the main) thread after ``seconds``; no limit at 0."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise CompileTimeLimit(f"{what} did not finish in {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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
        self.current = ""  # the phase the job is in (the innermost), for a failure's message
        self.meter: MemoryMeter | None = None  # started where the evaluation's tensors begin
        self.containment: list[str] = []  # the candidate worker's layers, as it said before its code ran
        self.host_load: HostLoad | None = None  # how busy the host was while timing

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase of the job; the times end up in the log (where evaluation time goes).
        Its name is also appended to the job's ``phase_file``, where the parent shows it live."""
        start = time.perf_counter()
        self._mark(name)
        outer, self.current = self.current, name
        try:
            yield
            self.current = outer  # left as it is when the phase raised: that phase is the failure's
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - start
            self._mark("/" + name)

    def _mark(self, line: str) -> None:
        """A phase's start (its name) or end ("/" and its name) in the job's ``phase_file``: a
        display, and where a killed worker was (``phases.open_phase``)."""
        if self.spec.get("phase_file"):
            with contextlib.suppress(OSError), open(self.spec["phase_file"], "a") as fh:
                fh.write(line + "\n")

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
        missing = [f"not contained: {line}" for line in self.containment if "NOT contained" in line]
        if missing:
            fields["flags"] = [*fields.get("flags", []), *missing]
        fields.setdefault("containment", self.containment)
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
        return {"status": Status.COMPILE_ERROR.value, "log": short_trace(err)}
    except BaseException as err:  # anything else surfaces again, with a GPU, in the eval worker
        return {"status": "ok", "log": f"imported with errors after building: {type(err).__name__}: {err}"}
    return {"status": "ok", "log": ""}


def time_all(
    job: Job,
    timer: Timer,
    reference: torch.nn.Module,
    inputs: list[Any],
    candidate: Slot,
    local: Callable[[Callable[[], Any]], LocalSlot],
) -> dict[str, Timing]:
    """The candidate's slot, eager and torch.compile (``local`` makes their slots) timed in
    interleaved rounds, each in blocks, from a random first order."""
    slots: dict[str, Slot] = {"candidate": candidate, "eager": local(lambda: reference(*inputs))}
    if job.spec["compile_baseline"]:
        compiled = torch.compile(reference)
        # PointNet++'s sampling loop (unseen8, 3001 ops) compiled past the whole worker's 300 s:
        # the baseline lost its eager time too, and the task had no reference to search against
        limit = job.spec.get("compile_limit_s", 0.0)
        try:
            with job.phase("torch.compile"), time_limit(limit, "torch.compile of the reference"):
                no_grad(lambda: compiled(*inputs))()
            slots["compile"] = local(lambda: compiled(*inputs))
        except (Exception, CompileTimeLimit) as err:  # the baseline failing is not the candidate's failure
            job.note(f"{COMPILE_FAILED}: {type(err).__name__}: {err}")
    order = list(slots)
    random.Random(job.spec["seed"]).shuffle(order)
    job.note(f"timing: interleaved rounds, first order {', '.join(order)} ({timer.label})")
    slots = {name: slots[name] for name in order}
    plain = {
        name: slot.fn for name, slot in slots.items() if isinstance(slot, LocalSlot) and name != "candidate"
    }
    check = os.environ.get(PLAIN_CHECK) == "1"  # bench_fidelity.py's reference, this process
    with quiet_timing() as job.host_load:
        before = timer.plain_loops(plain) if check else ""
        timings = timer.time_many(slots)
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

    def local(fn: Callable[[], Any]) -> LocalSlot:
        return LocalSlot(timer, no_grad(fn))

    with job.phase("timing"):
        timings = time_all(job, timer, reference, inputs, local(lambda: reference(*inputs)), local)
    gpu = detect_gpu() if job.device.type == "cuda" else None
    with torch.no_grad(), job.phase("roofline"):
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


def no_grad(fn: Callable[[], Any]) -> Callable[[], Any]:
    def wrapped() -> Any:
        with torch.no_grad():
            return fn()

    return wrapped


def short_trace(err: BaseException, max_chars: int = 6000) -> str:
    text = "".join(traceback.format_exception(err))
    return text[-max_chars:]
