"""A quiet host for the timed region.

A launch-bound forward (many small ops) is timed as much on the host as on the GPU: the
CUDA events measure the gaps while Python dispatches the next op. On an H100's 16-core host
a 20-op chain on a 512-vector took 0.22 ms alone and 0.68 ms with 32 busy processes beside
it (torch.compile of it 0.07 and 0.19 ms), while GPU-bound work did not move: the speedup
of a CUDA-graph candidate over eager tripled. In a batch the busy processes are kforge's
own: nvcc builds, Inductor's compile pools, spare workers importing torch, other GPUs'
workers. So, on a CUDA host with enough cores:

- Inductor's compile-worker pool, which torch.compile starts and warms up (importing torch
  in several processes) just before timing, is shut down first;
- :class:`HostLoad` counts the timing thread's involuntary context switches, so a busy host
  is reported with the result (a flag on it);
- on request (``KFORGE_TIMING_CPUS=auto``, or the cores: ``KFORGE_TIMING_CPUS=14,15``) cores
  are reserved for timing, one per GPU (GPU ordinal i times on the i-th, modulo their
  number): every worker kforge starts runs on the other cores, and so does all it starts,
  and only the thread that times moves to its GPU's core, for the timed region.

The reservation is off by default: on the H100's host it brought eager and torch.compile
times under load closer to a plain loop for an attention and an MLP (1.09 and 1.07 of the
plain loop without it, 1.04 and 1.02 with it), but the device's hosts are virtual machines
whose vCPUs run at different speeds (a 20-op chain at 0.13 ms on some vCPUs and 0.21-0.46
ms on others, which ones changing from process to process), so a pinned thread is only as
fast as the vCPU it got: pinned workers timed EfficientNetB2's eager forward 2x slower on an
idle host once (docs/log/2026-11-23-timing-host-load.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import resource
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ENV = "KFORGE_TIMING_CPUS"  # the reserved cores, or "off"
MINE = "KFORGE_TIMING_CPU"  # the core this worker's GPU times on
BUSY_SWITCHES_PER_S = 50.0  # involuntary context switches of the timing thread that mean a busy host
BUSY_HOST_FLAG = (
    "the host was busy while timing (the timing thread was preempted): launch-bound times are "
    "inflated, and so are speedups over a launch-bound eager"
)


def _allowed() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def host_gpus(dev: Path = Path("/dev")) -> int:
    """GPUs on this host (the /dev/nvidiaN files), whatever CUDA_VISIBLE_DEVICES says."""
    try:
        return sum(1 for p in dev.iterdir() if re.fullmatch(r"nvidia\d+", p.name))
    except OSError:
        return 0


def reserved_cpus(gpus: int | None = None, allowed: list[int] | None = None) -> list[int]:
    """The cores kept for timing as ``KFORGE_TIMING_CPUS`` says: none (unset or off), the
    cores it names, or (auto) one per GPU at the end of this process's cores when at least two
    per GPU plus two stay for everything else."""
    setting = os.environ.get(ENV, "").strip()
    if setting in ("", "off"):
        return []
    if setting != "auto":
        try:
            return [int(c) for c in setting.split(",")]
        except ValueError:
            raise SystemExit(f"{ENV}={setting!r}: give core numbers like 14,15, auto or off") from None
    n = max(1, host_gpus()) if gpus is None else gpus
    cpus = _allowed() if allowed is None else allowed
    if n < 1 or len(cpus) < 2 * n + 2:
        return []
    return cpus[-n:]


def timing_env(device: str, visible_gpu: str) -> dict[str, str]:
    """What a worker's environment says about the reservation: all reserved cores (to stay
    off) and the one its GPU times on. CPU timing (the wall clock of torch's CPU threads) is
    left alone unless ``KFORGE_TIMING_CPUS`` names cores."""
    setting = os.environ.get(ENV, "")
    reserved = reserved_cpus() if device == "cuda" or setting not in ("", "off", "auto") else []
    if not reserved and device == "cuda":
        # No core kept apart, but the judge's and the candidate's workers, which take turns,
        # time on the same one: on a virtual machine whose cores run at different speeds,
        # the host-bound part of each call then costs them the same (the judge compares it).
        cpus = _allowed()
        index = int(visible_gpu) if visible_gpu.isdigit() else 0
        return {ENV: "off", MINE: str(cpus[-1 - index % len(cpus)])}
    if not reserved:
        return {ENV: "off"}
    index = int(visible_gpu) if visible_gpu.isdigit() else 0
    return {ENV: ",".join(map(str, reserved)), MINE: str(reserved[index % len(reserved)])}


def pin_timing_thread() -> int | None:
    """Pin the calling thread to the core ``KFORGE_TIMING_CPU`` names (None: no core named, or
    not one this process may use). For a worker whose timing spans several requests."""
    mine = os.environ.get(MINE)
    if not mine:
        return None
    try:
        os.sched_setaffinity(0, {int(mine)})  # this thread only
    except (OSError, ValueError):
        return None
    return int(mine)


def background_cpus(env: dict[str, str]) -> set[int] | None:
    """The cores a worker with this environment runs on outside the timed region; None: all."""
    setting = env.get(ENV, "off")
    if setting == "off":
        return None
    rest = set(_allowed()) - {int(c) for c in setting.split(",")}
    return rest or None


@dataclasses.dataclass
class HostLoad:
    """How busy the host was while timing."""

    cpu: int | None = None  # the reserved core the timing thread ran on
    seconds: float = 0.0
    involuntary_switches: int = 0
    loadavg: float = 0.0
    cores: int = 0

    @property
    def busy(self) -> bool:
        return self.seconds > 0 and self.involuntary_switches > max(10, BUSY_SWITCHES_PER_S * self.seconds)

    def line(self) -> str:
        where = f"reserved cpu {self.cpu}" if self.cpu is not None else "no reserved cpu"
        return (
            f"timing host: {where}; {self.involuntary_switches} involuntary context switches in "
            f"{self.seconds:.1f} s; load {self.loadavg:.1f} on {self.cores} cores"
        )


def _thread_switches() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw


def stop_compile_pools() -> None:
    """Inductor's compile workers, if this process started any (they stay alive otherwise).
    In a worker that is PID 1 of its own namespace (tools/contain.py) the pool is killed
    rather than asked to finish (2.9 s of an H100 evaluation): whatever it leaves dies with
    the namespace."""
    module = sys.modules.get("torch._inductor.async_compile")
    shutdown = getattr(module, "shutdown_compile_workers", None)
    if shutdown is None:
        return
    if os.getpid() == 1:
        for child in _children():
            try:
                if b"compile_worker" in Path(f"/proc/{child}/cmdline").read_bytes():
                    os.kill(child, signal.SIGKILL)
            except OSError:
                continue
    shutdown()


def _children() -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()]
    except OSError:
        return []


@contextlib.contextmanager
def quiet_timing() -> Iterator[HostLoad]:
    """The timed region: compile pools stopped, this thread on its reserved core (when the
    environment names one), the host's load measured."""
    stop_compile_pools()
    mine = os.environ.get(MINE)
    load = HostLoad(cpu=int(mine) if mine else None, cores=os.cpu_count() or 1)
    before = _allowed()
    if load.cpu is not None:
        try:
            os.sched_setaffinity(0, {load.cpu})  # this thread only (Linux affinity is per thread)
        except OSError:
            load.cpu = None  # not a core this process may use (a cgroup's cpuset)
    start, switches = time.perf_counter(), _thread_switches()
    try:
        yield load
    finally:
        load.seconds = time.perf_counter() - start
        load.involuntary_switches = _thread_switches() - switches
        load.loadavg = os.getloadavg()[0]
        if load.cpu is not None:
            os.sched_setaffinity(0, before)
