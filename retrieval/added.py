"""Kernels added to the store from verified runs.

Each is appended to ``added_kernels.jsonl`` next to chromadb's files, so a rebuild or a
recovery from a corrupt store embeds them again. The same source is stored once.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..tools.hardware import GpuSpec
from ..tools.result import Result, Status
from ..tools.task import source_hash
from .chunking import Chunk, chunk_document
from .errors import RetrievalError
from .kernels import KernelRecord, kernel_document

if TYPE_CHECKING:
    from .store import Store


class NotVerified(RetrievalError):
    """Only candidates that evaluated ``ok`` and were not flagged as cheats can be added."""


def read_added(path: Path) -> list[Chunk]:
    if not path.is_file():
        return []
    chunks = []
    for line in path.read_text().splitlines():
        if line.strip():
            fields = json.loads(line)
            fields["topics"] = tuple(fields.get("topics", ()))
            record = KernelRecord(**fields)
            chunks.extend(chunk_document(kernel_document(record, _added_id(record.source), origin="added")))
    return chunks


def _added_id(source: str) -> str:
    return f"kernel/{source_hash(source)}"


def add_kernel(
    store: Store,
    source: str,
    result: Result,
    *,
    op: str,
    gpu: GpuSpec | None,
    task: str = "",
    summary: str = "",
    topics: tuple[str, ...] = (),
) -> tuple[str, bool]:
    """Store a verified kernel with its measured result. Returns its id and whether it was
    new: a source already stored (shipped or added) is not stored again."""
    if result.status != Status.OK or not result.correct or result.cheats:
        raise NotVerified(
            f"only verified kernels are added (status {result.status.value}, cheats {result.cheats or 'none'})"
        )
    existing = store.get("kernel", where={"source_hash": source_hash(source)})
    if existing:
        return existing[0].id, False
    today = datetime.date.today().isoformat()
    record = KernelRecord(
        name=source_hash(source),
        source=source,
        backend=result.backend,
        op=op,
        file=f"added/{source_hash(source)}.py",
        task=task,
        summary=summary,
        topics=topics,
        measured=result.headline(),
        gpu=(gpu.canonical or gpu.name) if gpu else "",
        arch=gpu.arch if gpu else "",
        measured_on=f"{today} {gpu.name}" if gpu else today,
    )
    store.path.mkdir(parents=True, exist_ok=True)
    with store.added_kernels_file.open("a") as out:
        out.write(json.dumps(dataclasses.asdict(record)) + "\n")
    chunk_id = _added_id(source)
    store.index_chunks(chunk_document(kernel_document(record, chunk_id, origin="added")))
    return chunk_id, True
