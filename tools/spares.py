"""Workers started ahead of their job: while one baseline runs, the next one's worker starts
at the lowest CPU priority and imports torch, then waits on its stdin for a job path. It is
a fresh process that has run nothing yet, with the same environment and limits, and it
serves one job. ``KFORGE_SPARE_WORKER=0`` turns this off. :func:`.sandbox.run_worker` uses
it; evaluations (two workers joined by pipes) start theirs fresh.

A spare is started only once baselines come one after another (a sweep measuring many
tasks), from the second on: an optimize run measures one baseline and then evaluations, and a
spare started after that baseline imported torch for nothing (2-3 s of CPU and a few hundred
MB, for every run of a batch or a test suite).
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .process import WORKER, Limits, _children, _kill_group, _preexec
from .quiet import background_cpus

SPARE_MODES = ("baseline",)  # single jobs that come one after another


@dataclasses.dataclass
class _Spare:
    proc: subprocess.Popen[bytes]
    key: tuple[Any, ...]
    log_path: Path
    result_fd: int  # the read end of its result pipe


_spare: _Spare | None = None
_spare_lock = threading.Lock()
_last_job = ""  # the kind of the last job this process gave a worker (a mode, or "evaluation")


def in_a_run(kind: str) -> bool:
    """Note a job of this kind; whether the job before it was of the same kind."""
    global _last_job
    with _spare_lock:
        repeated, _last_job = _last_job == kind, kind
    return repeated


def _spares_on() -> bool:
    return os.environ.get("KFORGE_SPARE_WORKER", "1") != "0"


def _key(limits: Limits, env: dict[str, str]) -> tuple[Any, ...]:
    return (sys.executable, dataclasses.astuple(limits), tuple(sorted(env.items())))


def _take_spare(key: tuple[Any, ...]) -> _Spare | None:
    """The waiting worker, if it was started for this environment and limits and is alive."""
    global _spare
    with _spare_lock:
        spare, _spare = _spare, None
    if spare is None:
        return None
    if spare.key == key and spare.proc.poll() is None:
        return spare
    _discard(spare)
    return None


def _start_spare(key: tuple[Any, ...], limits: Limits, env: dict[str, str], where: Path) -> None:
    global _spare
    with _spare_lock:
        if _spare is not None:
            return
        log_path = where / f"spare-{os.getpid()}-{time.monotonic_ns()}.log"
        cpus = background_cpus(env)
        read_end, write_end = os.pipe()
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(
                [sys.executable, *WORKER[:-1], WORKER[-1], "--result-fd", str(write_end), "--wait"],
                cwd=where,
                env=env,
                stdin=subprocess.PIPE,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                pass_fds=(write_end,),
                # Lowered only where the job can get its priority back (root).
                preexec_fn=lambda: _preexec(limits, cpus, nice=os.geteuid() == 0),
            )
        os.close(write_end)
        _spare = _Spare(proc, key, log_path, read_end)


def _discard(spare: _Spare) -> None:
    _kill_group(spare.proc)
    spare.proc.wait()
    if spare.proc.stdin is not None:
        spare.proc.stdin.close()
    os.close(spare.result_fd)
    spare.log_path.unlink(missing_ok=True)


def _renice(pid: int) -> None:
    """Every thread of ``pid`` back to priority 0. On Linux a nice value belongs to a thread:
    resetting the process's main thread alone leaves the threads it started while importing
    at 19, and a thread inherits its creator's value."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, 0)
        except (ProcessLookupError, PermissionError):
            pass


def _hand_over(spare: _Spare, job_path: Path) -> bool:
    """Give the waiting worker its job; False when it is gone. It is reniced first, while it
    still waits, so that nothing it starts for the job inherits the spare's low priority."""
    if os.geteuid() == 0:  # from now on it runs at normal priority, like a fresh worker
        for pid in (spare.proc.pid, *_children(spare.proc.pid)):  # the namespace's worker is a child
            _renice(pid)
    try:
        assert spare.proc.stdin is not None
        spare.proc.stdin.write(f"{job_path}\n".encode())
        spare.proc.stdin.close()
    except (BrokenPipeError, OSError):
        _discard(spare)
        return False
    return True


@atexit.register
def _end_spare() -> None:
    global _spare
    spare, _spare = _spare, None
    if spare is not None:
        _discard(spare)
