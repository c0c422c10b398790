"""Batch optimization: many tasks through the same optimize graph (``kforge batch``).

The rooms: ``tasks`` (which task files a batch runs), ``run`` (``run_batch``: the executor
loop and results.jsonl), ``job`` (one task: optimize, confirm, its line), ``local`` and
``ray`` (the two executors), ``results`` (results.jsonl), ``lock`` (who owns the folder),
``summary`` (summary.md/json and the plot).

Checking a batch's input needs no torch: the parts that run the engine (``BatchOptions``,
``run_batch``, ``run_task``) load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .lock import check_free
from .results import RESULTS, done_keys, read_results
from .summary import read_lines, write_summary
from .tasks import BATCH_META, BatchInputError, TaskEntry, parse_ints, select

if TYPE_CHECKING:
    from .job import BatchOptions, run_task
    from .run import run_batch

__all__ = [
    "BATCH_META",
    "RESULTS",
    "BatchInputError",
    "BatchOptions",
    "TaskEntry",
    "check_free",
    "done_keys",
    "parse_ints",
    "read_lines",
    "read_results",
    "run_batch",
    "run_task",
    "select",
    "write_summary",
]
_ENGINE = {"BatchOptions": "job", "run_task": "job", "run_batch": "run"}  # name: the module that has it


def __getattr__(name: str) -> Any:
    if name in _ENGINE:
        return getattr(importlib.import_module(f".{_ENGINE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
