"""Batch optimization: many tasks through the same optimize graph, by one of two executors:
a worker process per selected GPU of this host taking tasks from a shared queue (``local``;
one worker on the CPU), or one Ray task per GPU of a Ray cluster (``ray``). Each runs
``job.run_task`` per task.

Each task's run folder is ``OUT/runs/<task>/<run id>/``; the parent appends one line per
finished task to ``OUT/results.jsonl`` (``results``: written whole and flushed, by one
writer) and, at the end, writes ``summary.md``/``summary.json`` and the speedup plot. A batch
that was killed continues with ``resume``: finished tasks are skipped and a half-done task's
run folder is resumed through ``optimize(resume=...)``. One process at a time owns the folder
(``lock``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from .job import BatchOptions
from .local import local_pool
from .lock import owning
from .results import append_line, done_keys, set_aside_partial
from .tasks import BATCH_META, TaskEntry

Executor = Callable[[list[TaskEntry], BatchOptions], Iterator[dict[str, Any]]]


def _executor(options: BatchOptions) -> Executor:
    if options.ray is None:
        return local_pool
    from .ray import ray_pool

    return ray_pool


def run_batch(
    entries: list[TaskEntry], options: BatchOptions, on_line: Callable[[dict[str, Any]], None] | None = None
) -> list[dict[str, Any]]:
    """Run every entry not yet in results.jsonl through the options' executor (the local
    pool, or Ray with ``options.ray``); the lines written by this call. A BatchInputError
    when another live process owns the folder."""
    with owning(options.out):
        set_aside_partial(options.out)
        (options.out / BATCH_META).write_text(
            json.dumps(options.to_json() | {"tasks": [e.key for e in entries]}, indent=2)
        )
        finished = done_keys(options.out)
        pending = [e for e in entries if e.key not in finished]
        written: list[dict[str, Any]] = []
        for line in _executor(options)(pending, options) if pending else []:
            append_line(options.out, line)
            written.append(line)
            if on_line is not None:
                on_line(line)
    return written
