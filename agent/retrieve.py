"""Retrieval for the planner, when ``kforge.retrieval`` (and chromadb) can run here.

Retrieval is optional: when it is not installed, or raises one of its own errors (a
missing dependency, a model or corpus that cannot be loaded), the run goes on without
retrieved documents and says so in one line.
"""

from __future__ import annotations

import ast
import importlib
from typing import Any

from ..tools.hardware import GpuSpec
from ..tools.result import Result
from ..tools.task import Task
from .policy.base import Doc


class RetrievalMissing(RuntimeError):
    """Retrieval cannot be used on this machine. The message is one line."""


def task_ops(source: str) -> list[str]:
    """The operations a task calls (``torch.matmul``, ``F.relu``, ``x.sum`` give their names)."""
    ops: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr not in ops:
            ops.append(node.func.attr)
    return ops


def _modules() -> tuple[Any, type[BaseException]]:
    try:
        api = importlib.import_module("kforge.retrieval.api")
        errors = importlib.import_module("kforge.retrieval.errors")
    except ModuleNotFoundError as err:
        raise RetrievalMissing(f"retrieval is off: {err.name} is not installed") from None
    return api, errors.RetrievalError


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def retrieve_docs(task: Task, gpu: GpuSpec | None, budget_chars: int) -> list[Doc]:
    """Docs and prior kernels for the task; raises RetrievalMissing when retrieval cannot run."""
    api, retrieval_error = _modules()
    try:
        hits = api.retrieve_for_task(task.source, task_ops(task.source), gpu, budget_chars)
    except ModuleNotFoundError as err:
        raise RetrievalMissing(f"retrieval is off: {err.name} is not installed") from None
    except retrieval_error as err:
        raise RetrievalMissing(f"retrieval is off: {_one_line(err)}") from None
    return [
        Doc(id=hit.id, kind=hit.kind, text=hit.text, metadata={"score": hit.score, **hit.metadata})
        for hit in hits
    ]


def remember_winner(task: Task, source: str, result: Result, gpu: GpuSpec | None) -> str:
    """Add a verified, faster-than-eager kernel to the store so later runs can retrieve it.
    Returns what happened, in one line; raises RetrievalMissing when retrieval cannot run."""
    try:
        store_module = importlib.import_module("kforge.retrieval.store")
        added = importlib.import_module("kforge.retrieval.added")
        errors = importlib.import_module("kforge.retrieval.errors")
    except ModuleNotFoundError as err:
        raise RetrievalMissing(f"retrieval is off: {err.name} is not installed") from None
    ops = task_ops(task.source)
    try:
        kernel_id, new = added.add_kernel(
            store_module.Store(), source, result, op=ops[0] if ops else "unknown", gpu=gpu, task=task.name
        )
    except errors.RetrievalError as err:
        raise RetrievalMissing(f"retrieval is off: {_one_line(err)}") from None
    return f"{'added' if new else 'already stored'}: {kernel_id} in the retrieval store"
