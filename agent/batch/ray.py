"""The Ray executor behind ``run_batch`` (``kforge batch --ray auto|ADDRESS``): each pending task
runs as one Ray task that claims one GPU (``num_gpus=1``) and its share of the cluster's CPUs
for the compile work (Inductor's threads), and runs the same ``run_task`` a local worker runs.
Lines come back to the driver as they land; the driver appends them to results.jsonl and keeps
the resume logic. A worker process or node that dies costs only its in-flight task, which Ray
runs again (``max_retries``); the retry resumes the task's half-done run folder, so on several
machines the batch folder must be on storage every node sees, and every node needs kforge.

On ``--device cpu`` the cluster still schedules by GPU: start it with a GPU count of your
choice (``ray start --head --num-gpus 2``), one task runs per declared GPU.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .job import BatchOptions, run_task
from .tasks import BatchInputError, TaskEntry

RETRIES = 3  # runs of a task after its worker died, before it is recorded as an error


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise BatchInputError("--ray needs Ray: pip install 'kforge[ray]'") from None
    return ray


def ray_task(entry: TaskEntry, options: BatchOptions, cpus: int) -> dict[str, Any]:
    """One task on a Ray worker: the local worker's ``run_task``, with Inductor's compile
    threads held to the CPUs this task claimed, and where it ran."""
    if "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ:
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = str(cpus)
    line = run_task(entry, options)
    node = _ray().get_runtime_context().get_node_id()
    return line | {"worker": {"node": node, "pid": os.getpid()}}


START = "start one with `ray start --head --num-gpus N` (docs/batch.md)"


def cluster_address(address: str) -> str:
    """The GCS address ``--ray`` names: itself, or for ``auto`` ``RAY_ADDRESS`` or the cluster
    this machine last started (``ray start`` writes it under Ray's temp folder)."""
    if address != "auto":
        return address
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    written = Path(os.environ.get("RAY_TMPDIR") or "/tmp") / "ray" / "ray_current_cluster"
    try:
        return written.read_text().strip().splitlines()[0]
    except (OSError, IndexError):
        raise BatchInputError(f"--ray auto: no Ray cluster was started on this machine; {START}") from None


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail at once, in one line, when nothing answers at ``address`` (Ray itself retries a
    stale address for minutes)."""
    if address.startswith(("ray://", "local")):
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except (OSError, ValueError):
        raise BatchInputError(
            f"--ray: no Ray cluster answers at {address} (a stale or stopped cluster?); "
            f"`ray stop`, then {START.removeprefix('start one with ')}"
        ) from None


def _connect(ray: Any, address: str) -> tuple[int, int]:
    """Join the cluster; its GPU count and the CPUs each task claims."""
    resolved = cluster_address(address)
    check_reachable(resolved)
    try:
        ray.init(address=resolved, log_to_driver=False, logging_level="WARNING")
    except ConnectionError as err:
        raise BatchInputError(f"--ray {address}: no Ray cluster there ({err}); {START}") from None
    resources = ray.cluster_resources()
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
    if gpus < 1:
        ray.shutdown()
        raise BatchInputError(
            f"--ray {address}: the cluster declares no GPU; start its nodes with --num-gpus N"
            " (on CPU-only nodes with --device cpu, a count of your choice)"
        )
    return gpus, max(1, cpus // gpus)


def ray_pool(pending: list[TaskEntry], options: BatchOptions) -> Iterator[dict[str, Any]]:
    """Keep one task in flight per GPU of the cluster; each task's line as it lands. After
    ``max_time_s`` no new task is submitted (the rest waits for a resume)."""
    ray = _ray()
    gpus, cpus = _connect(ray, options.ray or "auto")
    remote = ray.remote(num_gpus=1, num_cpus=cpus, max_retries=RETRIES)(ray_task)
    deadline = time.time() + options.max_time_s if options.max_time_s is not None else None
    queued = list(pending)
    in_flight: dict[Any, TaskEntry] = {}
    try:
        while queued or in_flight:
            while queued and len(in_flight) < gpus and (deadline is None or time.time() < deadline):
                entry = queued.pop(0)
                in_flight[remote.remote(entry, options, cpus)] = entry
            if not in_flight:
                return
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            entry = in_flight.pop(ready[0])
            try:
                yield ray.get(ready[0])
            except ray.exceptions.RayError as err:  # its workers died RETRIES + 1 times
                message = f"{type(err).__name__}: {err}"[:500]
                yield {"task": entry.key, "path": str(entry.path), "level": entry.level, "status": "error",
                       "error": message}  # fmt: skip
    finally:
        ray.shutdown()
