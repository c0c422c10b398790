"""Run a worker process for untrusted candidate code.

Each worker is a fresh interpreter (``python -m kforge.tools.worker JOB``) in its own
scratch folder, with secrets removed from its environment, CPU-time and memory limits,
and a fresh network namespace where the operating system allows one. A crash, a hang,
an illegal memory access or running out of memory ends that worker only; the caller
gets a :class:`WorkerOutcome` saying which, with the worker's own log.

Evaluations run one after another, and a fresh worker spends seconds importing torch
before it does anything. So while one runs, the next is started, at the lowest CPU
priority (``worker --wait``). It imports, and then waits on its stdin for a job. It is a
new process that has run nothing yet, with the same environment and limits; it serves
only one job. ``KFORGE_SPARE_WORKER=0`` turns this off.
"""

from __future__ import annotations

import atexit
import ctypes
import dataclasses
import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .quiet import background_cpus

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|COOKIE|AUTH|SESSION", re.IGNORECASE)
SECRET_PREFIXES = ("AWS_", "OPENAI_", "ANTHROPIC_", "HF_", "HUGGING", "GH_", "GITHUB_", "AZURE_", "GOOGLE_")
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
RESULT_FILE = "result.json"
LOG_FILE = "worker.log"


@dataclasses.dataclass
class Limits:
    timeout_s: float
    memory_limit_gb: float
    cpu_time_s: float | None = None  # default: twice the timeout
    isolate_network: bool = True
    limit_address_space: bool = False  # RLIMIT_AS breaks CUDA (it reserves huge address ranges)


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
        return f"exited with code {code} before writing a result"


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment without anything that looks like a secret."""
    env = {
        k: v for k, v in os.environ.items() if not SECRET_NAME.search(k) and not k.startswith(SECRET_PREFIXES)
    }
    env.update(extra or {})
    return env


def _preexec(limits: Limits, cpus: set[int] | None, nice: bool = False) -> None:  # pragma: no cover - child
    os.setsid()  # own process group: a hang is killed with everything it started
    if cpus:  # off the cores reserved for timing (tools/quiet.py), with all it starts
        os.sched_setaffinity(0, cpus)
    if nice:  # a spare imports at the lowest priority beside the job that is running
        os.nice(19)
    cpu = int(limits.cpu_time_s or 2 * limits.timeout_s + 30)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    if limits.limit_address_space:
        mem = int(limits.memory_limit_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.isolate_network:
        libc = ctypes.CDLL(None, use_errno=True)
        flags = CLONE_NEWNET if os.geteuid() == 0 else CLONE_NEWUSER | CLONE_NEWNET
        libc.unshare(flags)  # where the OS refuses, the worker reports "network: shared"


SPARE_MODES = ("eval", "baseline")  # the jobs that come one after another


@dataclasses.dataclass
class _Spare:
    proc: subprocess.Popen[bytes]
    key: tuple[Any, ...]
    log_path: Path


_spare: _Spare | None = None
_spare_lock = threading.Lock()


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
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "kforge.tools.worker", "--wait"],
                cwd=where,
                env=env,
                stdin=subprocess.PIPE,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                # Lowered only where the job can get its priority back (root).
                preexec_fn=lambda: _preexec(limits, cpus, nice=os.geteuid() == 0),
            )
        _spare = _Spare(proc, key, log_path)


def _discard(spare: _Spare) -> None:
    _kill_group(spare.proc)
    spare.proc.wait()
    if spare.proc.stdin is not None:
        spare.proc.stdin.close()
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
        _renice(spare.proc.pid)
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


def run_worker(
    job: dict[str, Any],
    scratch: Path,
    limits: Limits,
    env: dict[str, str],
    prefix: list[str] | None = None,
) -> WorkerOutcome:
    """Run one job in a fresh worker process in ``scratch`` and collect what it reports.
    ``prefix`` wraps the worker in another program (ncu, compute-sanitizer)."""
    scratch.mkdir(parents=True, exist_ok=True)
    job_path = scratch / "job.json"
    job_path.write_text(json.dumps(job))
    result_path = scratch / RESULT_FILE
    result_path.unlink(missing_ok=True)
    log_path = scratch / LOG_FILE
    spares = prefix is None and job.get("mode") in SPARE_MODES and _spares_on()
    key = _key(limits, env)
    spare = _take_spare(key) if spares else None
    if spare is not None and not _hand_over(spare, job_path):
        spare = None
    start = time.monotonic()
    timed_out = out_of_memory = False
    cpus = background_cpus(env)
    with open(log_path, "wb") as log_file:
        if spare is not None:
            proc = spare.proc
        else:
            proc = subprocess.Popen(
                [*(prefix or []), sys.executable, "-m", "kforge.tools.worker", str(job_path)],
                cwd=scratch,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                preexec_fn=lambda: _preexec(limits, cpus),
            )
        if spares:  # the next job's worker imports while this one runs
            _start_spare(key, limits, env, scratch.parent)
        mem_limit_kb = limits.memory_limit_gb * 2**20
        try:
            while proc.poll() is None:
                if time.monotonic() - start > limits.timeout_s:
                    timed_out = True
                elif _rss_kb(proc.pid) > mem_limit_kb:
                    out_of_memory = True
                if timed_out or out_of_memory:
                    _kill_group(proc)
                    break
                time.sleep(0.05)
        except KeyboardInterrupt:  # the user stopped the run: the worker (its own group) goes too
            _kill_group(proc)
            raise
        proc.wait()
    if spare is not None:
        os.replace(spare.log_path, log_path)
    result = None
    if result_path.exists():
        try:
            result = json.loads(result_path.read_text())
        except json.JSONDecodeError:
            result = None  # half-written: the worker died while writing
    return WorkerOutcome(
        result=result,
        returncode=proc.returncode,
        timed_out=timed_out,
        out_of_memory=out_of_memory,
        elapsed_s=time.monotonic() - start,
        log=_tail(log_path),
        prestarted=spare is not None,
    )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _rss_kb(pid: int) -> float:
    """Resident memory of the worker and its children (compile helpers included)."""
    total = 0.0
    for child in [pid, *_children(pid)]:
        try:
            with open(f"/proc/{child}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += float(line.split()[1])
        except OSError:
            continue
    return total


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    kids = [int(p) for p in text.split()]
    return kids + [g for k in kids for g in _children(k)]


def _tail(path: Path, max_chars: int = 8000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-max_chars:].decode(errors="replace")
