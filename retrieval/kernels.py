"""Prior-kernel documents: the example candidates with their measured results, and
kernels added later from verified runs.

A kernel is one chunk (its source is never cut). Its id is ``kernel/<candidate stem>`` for
the shipped examples and ``kernel/<source hash>`` for added ones; ``source_hash`` in the
metadata keeps the same source from being stored twice.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..tools.task import source_hash
from .chunking import Document, MetaValue


@dataclasses.dataclass(frozen=True)
class KernelRecord:
    """What a kernel document is made of."""

    name: str  # candidate stem, e.g. "softmax_triton"
    source: str
    backend: str  # "cuda", "triton", "cupy" or "torch-only"
    op: str  # operator family, e.g. "softmax"
    file: str  # where it came from, e.g. "examples/candidates/softmax_triton.py"
    task: str = ""
    pattern: str = ""
    summary: str = ""
    topics: tuple[str, ...] = ()
    measured: dict[str, Any] | None = None  # a measured.json result entry, status "ok" only
    gpu: str = ""  # canonical GPU the measurement was taken on
    arch: str = ""
    measured_on: str = ""


def _result_line(record: KernelRecord) -> str:
    m = record.measured
    if not m:
        return "Not measured yet."
    parts = [f"Measured on {record.gpu or 'an unnamed GPU'} ({record.measured_on}):"]
    if m.get("candidate_ms") is not None:
        parts.append(f"{m['candidate_ms']:.4g} ms;")
    if m.get("speedup_vs_eager") is not None:
        parts.append(f"{m['speedup_vs_eager']:.2f}x vs eager PyTorch;")
    if m.get("speedup_vs_compile") is not None:
        parts.append(f"{m['speedup_vs_compile']:.2f}x vs torch.compile;")
    fraction = m.get("roofline_fraction")
    if fraction is not None and fraction > 1:
        parts.append("below the roofline floor of the reference's algorithm: it does fewer FLOPs.")
    elif fraction is not None:
        parts.append(f"{100 * fraction:.0f}% of the roofline floor.")
    return " ".join(parts)


def kernel_text(record: KernelRecord) -> str:
    topics = ", ".join(record.topics) or "-"
    lines = [
        record.summary or f"A {record.backend} kernel for {record.op}.",
        "",
        f"Op: {record.op}. Backend: {record.backend}. Pattern: {record.pattern or '-'}. Topics: {topics}.",
        f"Task: {record.task or '-'}. File: {record.file}.",
        _result_line(record),
        "",
        "```python",
        record.source.rstrip(),
        "```",
    ]
    return "\n".join(lines)


def kernel_metadata(record: KernelRecord, origin: str) -> dict[str, MetaValue]:
    meta: dict[str, MetaValue] = {
        "source": record.file,
        "op": record.op.lower(),
        "backend": record.backend,
        "source_hash": source_hash(record.source),
        "origin": origin,
    }
    if record.pattern:
        meta["pattern"] = record.pattern
    if record.topics:
        meta["topic"] = ",".join(record.topics)
    if record.task:
        meta["task"] = record.task
    m = record.measured
    if m:
        meta.update({"gpu": record.gpu, "measured_on": record.measured_on})
        if record.arch:
            meta["arch"] = record.arch
        for key, name in (
            ("speedup_vs_eager", "speedup"),
            ("speedup_vs_compile", "speedup_vs_compile"),
            ("candidate_ms", "candidate_ms"),
            ("roofline_fraction", "roofline_fraction"),
        ):
            if m.get(key) is not None:
                meta[name] = float(m[key])
    return meta


def kernel_document(record: KernelRecord, doc_id: str, origin: str) -> Document:
    title = f"{record.op} kernel ({record.backend}): {record.name}"
    return Document(doc_id, "kernel", title, kernel_text(record), kernel_metadata(record, origin), whole=True)


def catalog_records(
    catalog: list[dict[str, Any]], sources: dict[str, str], measured: dict[str, Any], arch_of: dict[str, str]
) -> list[KernelRecord]:
    """Records for every candidate in ``catalog`` whose source is in ``sources`` (keyed by
    the catalog's ``file``). ``measured`` is measured.json, possibly empty or partial."""
    gpu = str(measured.get("gpu", ""))
    results: dict[str, Any] = measured.get("results", {})
    records = []
    for entry in catalog:
        for cand in entry.get("candidates", []):
            file = cand["file"]
            result = results.get(file) or results.get(f"candidates/{file.rsplit('/', 1)[-1]}")
            ok = result if result and result.get("status") == "ok" else None
            records.append(
                KernelRecord(
                    name=file.rsplit("/", 1)[-1].removesuffix(".py"),
                    source=sources[file],
                    backend=cand.get("backend", "unknown"),
                    op=entry.get("op", "unknown"),
                    file=f"examples/{file}",
                    task=entry.get("task", ""),
                    pattern=entry.get("pattern", ""),
                    summary=cand.get("summary", ""),
                    topics=tuple(cand.get("topics", ())),
                    measured=ok,
                    gpu=gpu if ok else "",
                    arch=arch_of.get(gpu, "") if ok else "",
                    measured_on=str(measured.get("measured_on", "")) if ok else "",
                )
            )
    return records
