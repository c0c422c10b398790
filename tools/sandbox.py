"""Run worker processes for untrusted task and candidate code.

Each worker is a fresh interpreter (``python -P -m kforge.tools.worker JOB``) in its own
scratch folder, with an allowlisted environment, CPU-time, memory and file-size limits,
and its own pid, mount and network namespaces where the operating system allows them
(the worker then adds Landlock and seccomp: :mod:`.contain`). A crash, a hang,
an illegal memory access or running out of memory ends that worker only; the caller
gets a :class:`WorkerOutcome` saying which, with the tail of the worker's own log. What a
worker reports comes back over a pipe whose write end only that worker holds: nothing it
writes to the filesystem is read as a result. An evaluation is a pair (:func:`run_pair`):
the judge (the reference worker) and the candidate's worker, joined by two pipes.

Baseline jobs that come one after another have the next one's worker started ahead of its
job (:mod:`.spares`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .contain import allowed_env
from .process import WORKER, Limits, _kill_group, _preexec, _rss_kb
from .quiet import background_cpus
from .spares import SPARE_MODES, _hand_over, _key, _spares_on, _start_spare, _take_spare, in_a_run

LOG_FILE = "worker.log"
MAX_LOG_TAIL = 8000  # characters of a worker's log kept in a Result
MAX_RESULT_BYTES = 1 << 24  # a Result's JSON read back from the judge


@dataclasses.dataclass
class WorkerOutcome:
    result: dict[str, Any] | None  # what the worker wrote, if it got that far
    returncode: int | None
    timed_out: bool
    out_of_memory: bool
    elapsed_s: float
    log: str  # the tail of the worker's stdout and stderr
    prestarted: bool = False  # served by a worker started (and imported) ahead of the job

    @property
    def crash_reason(self) -> str:
        if self.timed_out:
            return "timed out"
        if self.out_of_memory:
            return "exceeded the host memory limit"
        code = self.returncode
        if code is not None and code < 0:
            return f"killed by signal {signal.Signals(-code).name}"
        if code is not None and 128 < code < 128 + 65 and code - 128 in _SIGNALS:
            # the pid namespace's outer process reports its worker's death by signal N as 128 + N
            return f"killed by signal {signal.Signals(code - 128).name}"
        return f"exited with code {code} before writing a result"


_SIGNALS = {int(s) for s in signal.Signals}


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A worker's environment: an allowlist of the parent's variables (no credentials, even in
    a URL), then ``extra`` (:func:`.contain.allowed_env`)."""
    return allowed_env(extra or {})


class _ResultReader(threading.Thread):
    """Drains a worker's result pipe while it runs (a Result over the pipe's 64 KiB buffer would
    otherwise block the worker), keeping at most MAX_RESULT_BYTES."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.data = bytearray()
        self.start()

    def run(self) -> None:
        with os.fdopen(self.fd, "rb") as pipe:
            while chunk := pipe.read(1 << 16):
                if len(self.data) < MAX_RESULT_BYTES:
                    self.data += chunk[: MAX_RESULT_BYTES - len(self.data)]

    def result(self) -> dict[str, Any] | None:
        self.join(timeout=5.0)
        try:
            value = json.loads(bytes(self.data)) if self.data else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None  # cut short: the worker died while writing
        return value if isinstance(value, dict) else None


def _spawn(
    argv: list[str], cwd: Path, env: dict[str, str], limits: Limits, log_path: Path, fds: tuple[int, ...]
) -> subprocess.Popen[bytes]:
    cpus = background_cpus(env)
    with open(log_path, "wb") as log_file:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            pass_fds=fds,
            preexec_fn=lambda: _preexec(limits, cpus),
        )


@dataclasses.dataclass
class _Watched:
    proc: subprocess.Popen[bytes]
    timed_out: bool = False
    out_of_memory: bool = False


def _watch(
    watched: list[_Watched], limits: Limits, start: float, grace_s: float = 5.0, shared: int | None = None
) -> None:
    """Until the first process (the one that reports) exits, or the time limit: a process over
    the memory limit is killed, with everything it started. The others get ``grace_s`` to
    finish after the first, then are killed too. The memory a ``shared`` file holds counts
    against the last process (the candidate's worker): pages written into it with ``pwrite``,
    or mapped and unmapped one piece at a time, are in no process's resident size."""
    mem_limit_kb = limits.memory_limit_gb * 2**20
    main = watched[0]
    try:
        while main.proc.poll() is None:
            if time.monotonic() - start > limits.timeout_s:
                for w in watched:
                    w.timed_out = w.proc.poll() is None
                    _kill_group(w.proc)
                break
            for w in watched:
                held = _file_kb(shared) if shared is not None and w is watched[-1] else 0.0
                if w.proc.poll() is None and held + _rss_kb(w.proc.pid, mem_limit_kb - held) > mem_limit_kb:
                    w.out_of_memory = True
                    _kill_group(w.proc)
            time.sleep(0.05)
    except KeyboardInterrupt:  # the user stopped the run: the workers (own groups) go too
        for w in watched:
            _kill_group(w.proc)
        raise
    end = time.monotonic() + grace_s
    for w in watched[1:]:
        while w.proc.poll() is None and time.monotonic() < end:
            time.sleep(0.02)
        _kill_group(w.proc)
    for w in watched:
        w.proc.wait()


def _file_kb(fd: int) -> float:
    """Kilobytes of memory a (sparse) file's written pages hold."""
    try:
        return os.fstat(fd).st_blocks / 2  # 512-byte blocks
    except OSError:
        return 0.0


def _outcome(w: _Watched, result: dict[str, Any] | None, start: float, log: Path, **kw: Any) -> WorkerOutcome:
    return WorkerOutcome(
        result=result,
        returncode=w.proc.returncode,
        timed_out=w.timed_out,
        out_of_memory=w.out_of_memory,
        elapsed_s=time.monotonic() - start,
        log=tail(log),
        **kw,
    )


def run_worker(
    job: dict[str, Any],
    scratch: Path,
    limits: Limits,
    env: dict[str, str],
    prefix: list[str] | None = None,
) -> WorkerOutcome:
    """Run one single job (baseline, compile, forward) in a fresh worker process in
    ``scratch`` and collect what it reports. ``prefix`` wraps the worker in another program
    (ncu, compute-sanitizer)."""
    scratch.mkdir(parents=True, exist_ok=True)
    if prefix:  # a profiler is the worker's parent: it stays out of the namespace (no pid namespace)
        limits = dataclasses.replace(limits, isolate_network=False)
    job_path = scratch / "job.json"
    job_path.write_text(json.dumps(job | {"role": "single"}))
    log_path = scratch / LOG_FILE
    repeated = in_a_run(str(job.get("mode")))
    spares = prefix is None and job.get("mode") in SPARE_MODES and _spares_on()
    key = _key(limits, env)
    spare = _take_spare(key) if spares else None
    if spare is not None and not _hand_over(spare, job_path):
        spare = None
    start = time.monotonic()
    if spare is not None:
        proc, reader = spare.proc, _ResultReader(spare.result_fd)
    else:
        read_end, write_end = os.pipe()
        argv = [*(prefix or []), sys.executable, *WORKER, "--result-fd", str(write_end), str(job_path)]
        proc = _spawn(argv, scratch, env, limits, log_path, (write_end,))
        os.close(write_end)
        reader = _ResultReader(read_end)
    if spares and repeated:  # baselines in a row: the next one's worker imports while this one runs
        _start_spare(key, limits, env, scratch.parent)
    watched = _Watched(proc)
    _watch([watched], limits, start)
    if spare is not None:
        os.replace(spare.log_path, log_path)
    return _outcome(watched, reader.result(), start, log_path, prestarted=spare is not None)


@dataclasses.dataclass
class Pair:
    """Where and how the two workers of an evaluation run."""

    judge_job: dict[str, Any]
    candidate_job: dict[str, Any]
    judge_dir: Path
    candidate_dir: Path
    judge_env: dict[str, str]
    candidate_env: dict[str, str]


SHARED_BYTES = 1 << 40  # the shared file's size: sparse, only the pages a message touches are memory


def shared_file() -> int | None:
    """A shared memory file for a judge and its candidate's worker (None where the platform has
    no memfd: the tensors then go through the pipes). Sized here, where no RLIMIT_FSIZE holds:
    the workers may not grow a file past MAX_FILE_BYTES (1 GiB), and a 7 GB message must fit."""
    try:
        fd = os.memfd_create("kforge-pair", 0)  # not inherited except where passed explicitly
    except (AttributeError, OSError):
        return None
    try:
        os.ftruncate(fd, SHARED_BYTES)
    except OSError:
        os.close(fd)
        return None
    return fd


def run_pair(pair: Pair, limits: Limits) -> tuple[WorkerOutcome, WorkerOutcome]:
    """Run an evaluation: the judge and the candidate's worker, joined by two pipes; the
    judge's Result comes back over a third pipe only the judge holds. Returns the judge's
    and the candidate worker's outcomes (the candidate's has no result, only its log and how
    it ended)."""
    in_a_run("evaluation")  # a baseline after this is a run's first again
    to_cand, from_cand, result = os.pipe(), os.pipe(), os.pipe()
    shared = shared_file()  # the tensors' bytes (wire.py); None: through the pipes
    extra = () if shared is None else (shared,)
    judge_fds = (from_cand[0], to_cand[1], result[1], *extra)
    cand_fds = (to_cand[0], from_cand[1], *extra)
    paths = []
    for folder, job, fds in (
        (pair.judge_dir, pair.judge_job | {"role": "judge"}, judge_fds),
        (pair.candidate_dir, pair.candidate_job | {"role": "candidate"}, cand_fds),
    ):
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "job.json"
        path.write_text(json.dumps(job | {"read_fd": fds[0], "write_fd": fds[1], "shared_fd": shared}))
        paths.append(path)
    start = time.monotonic()
    judge = _spawn(
        [sys.executable, *WORKER, "--result-fd", str(result[1]), str(paths[0])],
        pair.judge_dir, pair.judge_env, limits, pair.judge_dir / LOG_FILE, judge_fds,
    )  # fmt: skip
    cand = _spawn(
        [sys.executable, *WORKER, str(paths[1])],
        pair.candidate_dir, pair.candidate_env, limits, pair.candidate_dir / LOG_FILE, cand_fds,
    )  # fmt: skip
    for fd in {*judge_fds, *cand_fds} - {shared}:
        os.close(fd)  # each end lives in its worker only: a dead worker is an end of stream
    reader = _ResultReader(result[0])
    watched = [_Watched(judge), _Watched(cand)]
    try:
        _watch(watched, limits, start, shared=shared)  # the shared file's pages count too
    finally:
        if shared is not None:
            os.close(shared)
    return (
        _outcome(watched[0], reader.result(), start, pair.judge_dir / LOG_FILE),
        _outcome(watched[1], None, start, pair.candidate_dir / LOG_FILE),
    )


def tail(path: Path, max_chars: int = MAX_LOG_TAIL) -> str:
    """The end of a log, read from its end: a worker that printed gigabytes costs kforge
    ``max_chars`` of memory, not the log's size."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 4 * max_chars))
            data = f.read()
    except OSError:
        return ""
    return data.decode(errors="replace")[-max_chars:]
