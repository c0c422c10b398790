"""The judge: verifies and times one candidate without ever loading its code.

Runs in the reference worker, a process that imports the task and kforge and nothing of the
candidate. The candidate runs in its own worker (:mod:`.candidate_worker`), reached through
a :class:`~.remote.RemoteCandidate`. Inputs and weights are drawn here, the reference's
outputs and their float64 answers are computed here, every comparison and every verdict is
made here, and the Result goes to kforge over a pipe the candidate's process does not hold.
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from .checksum import Checksum, norms
from .claims import copy_bandwidth_gbps, hidden_time_reason, light_reason, stale_reason
from .compare import rel_err
from .fingerprint import COPY_BYTES
from .guards import set_precision_flags
from .hardware import detect_gpu
from .memory import MemoryMeter, allocated_mb, big_tensors
from .remote import CandidateFailed, CandidateFormatError, RemoteCandidate, RemoteSlot
from .result import Result, Roofline, Status, Timing
from .roofline import roofline, tensor_bytes
from .runner import SUSPICIOUS_SPEEDUP, Job, network_state, no_grad, time_all
from .task import import_file
from .timing import InputSwitcher, LocalSlot, Timer
from .trees import clone, flatten, release
from .verify import Trial, Verifier, _reference64
from .wire import Channel, WireError


def run_eval(spec: dict[str, Any], channel: Channel) -> Result:
    """Verify and time the candidate behind ``channel`` against the task in ``spec``."""
    job = Job(spec)
    set_precision_flags(job.precision.name)
    job.note(f"network: {network_state()}")
    for line in spec.get("containment", []):
        job.note(f"judge containment: {line}")
    task = import_file(Path(spec["task_path"]), "kforge_task")
    candidate = RemoteCandidate(channel, job.device)
    with job.phase("candidate import"):  # its builds (load_inline) run here
        failed = _wait_ready(job, channel)
    if failed is not None:
        return failed
    try:
        return _verify_and_time(job, task, candidate)
    except CandidateFormatError as err:
        return job.result(Status.FORMAT_ERROR, log=str(err))
    except CandidateFailed as err:
        return job.result(Status.RUNTIME_ERROR, log=f"candidate failed in {err.phase}:\n{err.message}")
    except torch.OutOfMemoryError as err:  # the judge's own tensors: say where, and who held what
        return job.result(Status.RUNTIME_ERROR, log=_out_of_memory(job, candidate, err))
    finally:
        candidate.close()


WORKER_WORDS = 400  # characters of the worker's tensor list an out-of-memory message quotes


def _out_of_memory(job: Job, candidate: RemoteCandidate, err: BaseException) -> str:
    """The judge ran out of GPU memory: in which phase, what each process held then."""
    release(job.device)
    mine = f"the judge {allocated_mb(job.device) / 1024:.1f} GB ({big_tensors(job.device)})"
    if candidate.midway:  # part of an answer may still be in the pipe: another request would misread it
        theirs = "the candidate's worker not asked (the judge ran out receiving its answer)"
    else:
        theirs = _worker_memory(candidate)
    first = ". ".join(str(err).split(". ")[:2])  # "CUDA out of memory. Tried to allocate N GiB"
    return (
        f"the judge ran out of GPU memory in {job.current or 'setup'} ({first}); allocated then: "
        f"{mine}, {theirs}. A task whose inputs fill a large part of the GPU: give it a GPU of its "
        "own (no other job on it)"
    )


def _worker_memory(candidate: RemoteCandidate) -> str:
    """What the worker says it holds: its words, so a figure that is no number ends the message
    there and its list is cut short (the message is the judge's log, not the worker's)."""
    try:
        reply = candidate.report(detail=True)
        held = float(reply.get("allocated_mb", 0.0)) / 1024
    except (CandidateFailed, WireError):
        return "the candidate's worker did not answer"
    except (TypeError, ValueError):
        return "the candidate's worker gave no figure"
    return f"the candidate's worker {held:.1f} GB ({str(reply.get('big_tensors', ''))[:WORKER_WORDS]})"


def _wait_ready(job: Job, channel: Channel) -> Result | None:
    """None when the candidate imported; else the Result of its failing import. The worker's
    first message, sent before the candidate's code ran, says which containment layers hold it."""
    try:
        kind, fields, _ = channel.recv()
        if kind == "hello":
            job.containment = [str(line) for line in fields.get("containment", [])][:20]
            kind, fields, _ = channel.recv()
    except WireError as err:
        return job.result(Status.RUNTIME_ERROR, log=f"the candidate worker died while importing ({err})")
    if kind == "ready":
        return None
    if kind == "import_failed" and fields.get("build_error"):
        return job.result(Status.COMPILE_ERROR, log=str(fields.get("message", "")))
    return job.result(
        Status.RUNTIME_ERROR, log="candidate raises at import:\n" + str(fields.get("message", ""))
    )


def _verify_and_time(job: Job, task: Any, candidate: RemoteCandidate) -> Result:
    verifier = Verifier(task, candidate, job.device, job.precision, job.spec.get("lean_bytes", COPY_BYTES))
    job.meter = MemoryMeter(job.device)
    with job.phase("verify"):
        verdict = verifier.run(job.spec["trials"], job.spec["seed"])
    report = candidate.report()
    errors = verifier.memory_figures() | dict(
        trials=verdict.trials,
        max_abs_err=verdict.max_abs_err,
        max_rel_err=verdict.max_rel_err,
        fp64_rel_err=verdict.fp64_rel_err,
        ref_fp64_rel_err=verdict.ref_fp64_rel_err,
        candidate_memory_mb=report.get("candidate_memory_mb"),
    )
    cheats = list(dict.fromkeys(verdict.cheats + candidate.observed))
    if cheats:
        return job.result(Status.REJECTED, cheats=cheats, log=verdict.message, **errors)
    if not verdict.correct or verifier.last is None:
        return job.result(Status.INCORRECT, log=verdict.message, **errors)
    trial = verifier.last
    timer = Timer(job.device, job.spec["timing_trials"])
    with job.phase("timing"):
        timings, cheats = time_candidate(job, timer, verifier, trial, candidate, verdict.ref_fp64_rel_err)
    candidate.report()
    cheats = list(dict.fromkeys(cheats + candidate.observed))
    gpu = detect_gpu() if job.device.type == "cuda" else None
    known = job.spec.get("roofline")  # the task's, measured by an earlier worker
    with torch.no_grad(), job.phase("roofline"):
        roof = (
            Roofline(**known) if known else roofline(trial.reference, trial.inputs, gpu, job.precision.name)
        )
    result = job.result(
        Status.REJECTED if cheats else Status.OK,
        correct=True,
        flags=list(dict.fromkeys(verdict.notes)),
        cheats=cheats,
        candidate=timings["candidate"],
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
        _strict_recheck(verifier, result, job.spec)
    return result


def _strict_recheck(verifier: Verifier, result: Result, spec: dict[str, Any]) -> None:
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
    candidate: RemoteCandidate,
    ref_fp64_err: float | None,
) -> tuple[dict[str, Timing], list[str]]:
    """The candidate (in its process) timed against eager and torch.compile (here) in the
    same interleaved rounds, and the judge's checks of its claims: (timings, cheats)."""
    with job.phase("timing: inputs and answers"):
        candidate.request("timing", "ping")  # answered once the worker handed its cached memory back
        # Inputs over a GiB: two copies of them in each process, not three, and each side's cached
        # memory back to the driver after its blocks (the other needs it next); see InputSwitcher.
        # The switcher comes first: with swap the first set's values go into the inputs at once, so
        # the reference's answers below are computed beside two copies, not three.
        lean = tensor_bytes(trial.inputs) > job.spec.get("lean_bytes", COPY_BYTES)
        switcher = _switcher(job, trial, verifier, [verifier.fresh_inputs(), verifier.fresh_inputs()], lean)
        sets = [switcher.values(0), switcher.values(1)]
        checksum = Checksum(random.SystemRandom().randrange(2**62), job.device)
        expected, limit = _expected(trial.reference, sets, checksum, job, ref_fp64_err, verifier)
    with job.phase("timing: sets to the candidate"):
        candidate.request("timing", "timing_sets", {"checksum_seed": checksum.seed, "lean": lean}, sets)
    remote = RemoteSlot(candidate)
    del sets

    def local(fn: Any) -> LocalSlot:  # eager and torch.compile switch inputs and checksum like the candidate
        return LocalSlot(timer, no_grad(fn), switcher, checksum.of, release=lean)

    reference = trial.reference

    def rounds() -> dict[str, Timing]:
        with job.phase("timing: rounds"):
            return time_all(job, timer, reference, trial.inputs, remote, local)

    timings = rounds()
    hidden, timings = _wall_clock(job, timer, candidate, remote, timings, rounds)
    cheats = []
    stale = stale_reason(remote.checksums, remote.sets, expected, limit)
    if not stale:
        turn, last = remote.fetch_last()
        if turn in (0, 1):  # from here on each side keeps one input set (InputSwitcher.keep)
            candidate.request("timing", "timing_done")
        stale = verifier.recheck(last, reference, switcher.keep(turn), limit) if turn in (0, 1) else "no set"
        del last
        if stale and not stale.startswith("precision lowered"):
            stale = f"what was timed is not what was verified (stale or cached results): {stale}"
    cheats += [stale] if stale else []
    cheats += [hidden] if hidden else []
    median = timings["candidate"].median_ms
    moved = tensor_bytes(trial.inputs) + verifier.output_bytes()
    light = light_reason(median, moved, copy_bandwidth_gbps(job.device))
    cheats += [light] if light else []
    hidden_work = _escaped(job, candidate, median)
    cheats += [hidden_work] if hidden_work else []
    return timings, cheats


ESCAPED_REPEATS = 5  # calls whose median says how long the device stays busy after the stream
ESCAPED_CONFIRM_REPEATS = 21  # and, before that is believed, again over this many


def _escaped(job: Job, candidate: RemoteCandidate, median: float) -> str:
    """Why the device's work outlasts the caller's stream ("" when it does not): measured
    again over more calls before it is believed, as the wall-clock check is. An honest
    compile-cpp-wrapper candidate measured 0.165 ms over its 0.247 once (NeoX's rotary, H100,
    2026-11-27; three other evaluations of it that day were clean): a side stream's work is
    there on every call and stays."""
    limit = max(0.05, 0.5 * median)

    def measure(repeats: int) -> float:
        reply = candidate.request("timing", "escaped", {"repeats": repeats})[0]
        value = reply.get("ms", 0.0)
        return float(value) if isinstance(value, int | float) else 0.0

    first = measure(ESCAPED_REPEATS)
    if first <= limit:
        return ""
    again = measure(ESCAPED_CONFIRM_REPEATS)
    if again <= limit:
        job.note(
            f"the side-stream check measured {first:.3f} ms of work after the caller's stream, then "
            f"{again:.3f} ms over {ESCAPED_CONFIRM_REPEATS} calls: not believed"
        )
        return ""
    return (
        f"work the timer misses: the device stays busy {again:.3f} ms after the caller's stream "
        f"finished (timed: {median:.3f} ms; {first:.3f} ms at first): a side stream or thread"
    )


def _switcher(job: Job, trial: Trial, verifier: Verifier, sets: list[list[Any]], lean: bool) -> InputSwitcher:
    """The judge's side of the timed sets: with ``lean``, the inputs and one spare swapped in
    place unless the reference writes its inputs (InputSwitcher)."""
    swap = lean and not verifier.reference_changes_inputs
    switcher = InputSwitcher(trial.inputs, sets[0], sets[1], swap=swap)
    if lean:
        how = (
            "inputs and one spare set, swapped in place"
            if swap
            else "three copies: the reference writes its inputs"
        )
        size = tensor_bytes(trial.inputs) / 2**20
        job.note(f"timing lean ({size:.0f} MB of inputs): {how}; cached memory released after each block")
    return switcher


def _wall_clock(
    job: Job,
    timer: Timer,
    candidate: RemoteCandidate,
    remote: RemoteSlot,
    timings: dict[str, Timing],
    rounds: Any,
) -> tuple[str, dict[str, Timing]]:
    """The judge's clock against the candidate's claims (:func:`.claims.hidden_time_reason`):
    (reason to reject or "", the timings to report). A check that fails is made once more on
    new rounds before it is believed (a burst of host load can fall on the candidate's blocks
    alone), and so is a pass that only the host's noise allowed (a burst on eager's blocks
    hides as much); those rounds' timings are then the ones reported."""
    for attempt in (1, 2):
        trusted = [(timer.walls[n], timer.samples[n]) for n in timer.walls if n != "candidate"]
        hidden, line, doubtful = hidden_time_reason(
            job.device.type,
            (timer.walls["candidate"], timer.samples["candidate"]),
            trusted,
            timer.block_size(),
            _round_trip_ms(candidate, remote.last_reply),
            remote.echoes[-len(timer.walls["candidate"]) :],
        )
        job.note(line)
        if not (hidden or doubtful) or attempt == 2:
            return hidden, timings
        said = "failed" if hidden else "passed only inside the host's noise"
        job.note(f"the wall-clock check {said}: timing again before it is believed")
        timings = rounds()
    return "", timings


def _expected(
    reference: torch.nn.Module,
    sets: list[list[Any]],
    checksum: Checksum,
    job: Job,
    ref_err: float | None,
    verifier: Verifier,
) -> tuple[list[Any], float]:
    """Per input set, (checksums, norms) of the answer each timed output must fit, and the
    relative error allowed: the float64 answer within the class's bound (as in verification),
    or eager's output within a looser one where the task has no float64 kernels."""
    expected, worst = [], ref_err or 0.0
    exact = True
    for inputs in sets:  # copies only where the reference writes to its inputs
        own = clone if verifier.reference_changes_inputs else (lambda x: x)
        with torch.no_grad():
            eager = reference(*own(inputs))
        out64 = _reference64(reference, own(inputs))
        if out64 is None:
            exact, answer = False, eager
        else:  # float leaves from float64; the others (indices, masks) as eager computes them
            answer = [e if _floating(e) else r for e, r in zip(flatten(out64), flatten(eager), strict=True)]
            worst = max(worst, rel_err(eager, out64))
        expected.append((checksum.of(answer), norms(answer)))
        del eager, out64, answer
        release(job.device)
    bound = job.precision.max_fp64_rel_err
    limit = max(bound, 10 * worst) if exact else max(10 * bound, job.precision.rtol)
    return expected, limit


def _round_trip_ms(candidate: RemoteCandidate, reply: dict[str, Any]) -> float:
    """The part of a block's wall time that is the pipe and the worker's dispatch: the median
    of five requests that carry a block's answer there and back, doing nothing else. (A
    worker that answers them slowly only raises this figure, which the check caps.)"""
    times = []
    for _ in range(5):
        start = time.perf_counter()
        candidate.request("timing", "ping", {"echo": reply})
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _floating(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()
