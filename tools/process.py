"""A worker process's setup and end: its limits, what the child does before it runs (own
process group, CPU set, rlimits, namespaces), and killing it with all it started. Shared by
:mod:`.sandbox` (the job's workers) and :mod:`.spares` (workers started ahead of a job)."""

from __future__ import annotations

import dataclasses
import os
import resource
import signal
import subprocess
from pathlib import Path

from .contain import enter_pid_namespace

MAX_FILE_BYTES = 1 << 30  # the largest file a worker may write (its log, a built extension)


@dataclasses.dataclass
class Limits:
    timeout_s: float
    memory_limit_gb: float
    cpu_time_s: float | None = None  # default: twice the timeout
    isolate_network: bool = True
    limit_address_space: bool = False  # RLIMIT_AS breaks CUDA (it reserves huge address ranges)


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
    # No file it writes, its log included, grows past this: a candidate printing gigabytes
    # fills neither the disk nor (kforge reads logs from their end) kforge's memory.
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    if limits.isolate_network:  # pid, mount and network namespaces: nothing outlives the worker
        enter_pid_namespace()  # where the OS refuses, the worker's processes line says why


WORKER = ["-P", "-m", "kforge.tools.worker"]  # -P: the working folder stays off sys.path


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _rss_kb(pid: int, limit_kb: float = 0.0) -> float:
    """Memory of the worker and everything it started (compile helpers included), each page
    shared by several of them counted once in all (the proportional set size): a fork bomb's
    200 copies of the same pages are one copy, not 200.

    The sum of the resident sizes (``statm``: constant time) bounds it from above, so while that
    sum is within ``limit_kb`` it is the answer the caller needs; the proportional size
    (``smaps_rollup``: the kernel walks every mapping, 30 ms for a process that imported torch,
    which polled every 50 ms for two workers kept a core of a 2-core host busy) is read only past it."""
    tree = [pid, *_children(pid)]
    resident = sum(_statm_kb(child) for child in tree)
    if resident <= limit_kb:
        return resident
    total = 0.0
    for child in tree:
        try:
            with open(f"/proc/{child}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += float(line.split()[1])
                        break
        except OSError:
            continue
    return total


_PAGE_KB = os.sysconf("SC_PAGE_SIZE") / 1024 if hasattr(os, "sysconf") else 4.0


def _statm_kb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return float(f.read().split()[1]) * _PAGE_KB
    except (OSError, IndexError, ValueError):
        return 0.0


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    kids = [int(p) for p in text.split()]
    return kids + [g for k in kids for g in _children(k)]


PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Have the kernel send ``sig`` to this process when the thread that started it ends (Linux;
    elsewhere nothing). A parent already gone by the time this runs gets ``sig`` sent here now."""
    import ctypes

    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent or parent == 1:
        os.kill(os.getpid(), sig)


def watch_parent(parent: int, sig: int = signal.SIGTERM, every_s: float = 0.5) -> None:
    """A daemon thread that sends ``sig`` to this process once ``parent`` is no longer its parent
    (for children started from a thread that may end before them, where PDEATHSIG would fire)."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os.kill(os.getpid(), sig)

    threading.Thread(target=watch, name="kforge-parent-watch", daemon=True).start()
