"""The default executor behind ``run_batch``: one worker process per selected GPU (one on the
CPU) taking tasks from a shared queue, each running ``job.run_task``."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
from collections.abc import Iterator
from typing import Any

from ...tools.process import die_with_parent
from .job import BatchOptions, run_task
from .lock import add_owners
from .tasks import TaskEntry


def share_of_host(workers: int, cpus: int | None = None) -> dict[str, str]:
    """Environment for one of ``workers`` batch workers on one host: each gets its share of
    the cores for Inductor's compile threads (by default every worker would start one per
    core, 8 x 128 on an 8-GPU host, while another worker times a host-bound forward).
    Variables the user set are kept."""
    if "TORCHINDUCTOR_COMPILE_THREADS" in os.environ:
        return {}
    share = max(1, (cpus or os.cpu_count() or 1) // max(1, workers))
    return {"TORCHINDUCTOR_COMPILE_THREADS": str(share)}


def visible_gpu(index: int, visible: str | None = None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value that shows a worker the batch's GPU ``index`` (its
    number as the batch process counts them): with ``CUDA_VISIBLE_DEVICES=2,3`` set for the
    batch, GPU 0 is device 2, not device 0."""
    listed = [d.strip() for d in (visible or "").split(",") if d.strip()]
    return listed[index] if index < len(listed) else str(index)


def _worker(
    gpu: int | None,
    options: BatchOptions,
    tasks: Any,
    results: Any,
    deadline: float | None,
    workers: int = 1,
    parent: int | None = None,
) -> None:
    die_with_parent()  # a killed batch (TERM, Ctrl-C, a time limit) takes its workers with it
    if gpu is not None:  # this process only ever sees its own GPU
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_gpu(gpu, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if workers > 1:
        os.environ.update(share_of_host(workers))
    try:
        while deadline is None or time.time() < deadline:
            if parent is not None and os.getppid() != parent:  # the batch process was killed:
                results.cancel_join_thread()  # nobody reads the lines it holds; take no new task
                return
            entry = tasks.get()
            if entry is None:
                return
            results.put(run_task(entry, options))
    except KeyboardInterrupt:  # Ctrl-C reaches the whole group: the batch says how to resume
        results.cancel_join_thread()  # (each worker's traceback filled the log, 2026-11-28)


def local_pool(pending: list[TaskEntry], options: BatchOptions) -> Iterator[dict[str, Any]]:
    """The default executor: one worker process per selected GPU (one on the CPU) taking
    tasks from a shared queue; each task's line as it lands. A task whose worker died, or
    that the deadline left unstarted, yields nothing and stays pending for a resume."""
    ctx = mp.get_context("spawn")
    tasks, results = ctx.Queue(), ctx.Queue()
    gpus: list[int | None] = list(options.gpus) if options.settings.device == "cuda" else [None]
    gpus = gpus[: len(pending)]
    for entry in pending:
        tasks.put(entry)
    for _ in gpus:
        tasks.put(None)
    deadline = time.time() + options.max_time_s if options.max_time_s is not None else None
    workers = [
        ctx.Process(
            target=_worker, args=(gpu, options, tasks, results, deadline, len(gpus), os.getpid()), daemon=True
        )
        for gpu in gpus
    ]
    for w in workers:
        w.start()
    add_owners(options.out, [w.pid for w in workers if w.pid is not None])
    received = 0
    while received < len(pending):
        try:
            line = results.get(timeout=2.0)
        except queue.Empty:
            if any(w.is_alive() for w in workers):
                continue
            try:  # every worker has ended: take what the last one sent before it went
                line = results.get(timeout=2.0)
            except queue.Empty:
                break
        received += 1
        yield line
    for w in workers:
        w.join(timeout=10)
