"""What the agents call: the hardware facts, guides and prior kernels that fit a task.

    hits = retrieve_for_task(task.source, ["softmax"], detect_gpu(), budget_chars=12_000)

Each :class:`Hit` has a stable ``id`` for the prompt to cite. The agent turns hits into its
own ``Doc`` objects; retrieval does not import the agent.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from ..tools.hardware import GpuSpec, match_spec, spec_table
from .corpus import corpus_chunks, load_documents
from .hits import Hit
from .store import Store

HARDWARE_SHARE = 0.3  # at most this fraction of the budget goes to hardware facts
QUERY_SOURCE_CHARS = 1200


def resolve_gpu(name: str) -> str:
    """The canonical name for ``name`` ("H100-SXM", "h100 sxm", "NVIDIA H100 80GB HBM3")."""
    table = spec_table()
    for canonical in table:
        if canonical.lower() == name.lower():
            return canonical
    found = match_spec(name)
    if found is None:
        raise ValueError(f"unknown GPU {name!r}: known ones are {', '.join(table)}")
    return found


def gpu_filter(gpu: str) -> dict[str, Any] | None:
    """A where-filter keeping chunks about ``gpu`` and chunks tied to no GPU (guides,
    unmeasured kernels); it drops what is about another GPU."""
    canonical = resolve_gpu(gpu)
    others = [name for name in spec_table() if name != canonical]
    return {"gpu": {"$nin": others}} if others else None


def task_query(task_source: str, ops: list[str]) -> str:
    """The query text for a task: its ops, then its source without imports and blank lines."""
    lines = [
        ln.rstrip()
        for ln in task_source.splitlines()
        if ln.strip() and not re.match(r"\s*(import|from)\s", ln)
    ]
    body = "\n".join(lines)[:QUERY_SOURCE_CHARS]
    return f"Optimize a PyTorch module using: {', '.join(ops) or 'unknown ops'}.\n{body}"


def _detected_sheet(gpu: GpuSpec) -> Hit:
    """Facts about a GPU that is not in the spec table, from what the driver reported."""
    text = (
        f"# Detected GPU: {gpu.name}\n\nCompute capability {gpu.compute_capability} ({gpu.arch}), "
        f"{gpu.sms} SMs, L2 {gpu.l2_bytes / 2**20:.0f} MB, up to {gpu.smem_per_block_bytes // 1024} KB "
        f"shared memory per block, {gpu.memory_bytes / 1e9:.0f} GB memory. No datasheet peaks are known."
    )
    return Hit(
        "hardware/detected", "hardware", 1.0, text, {"kind": "hardware", "arch": gpu.arch, "gpu": gpu.name}
    )


def hardware_hits(store: Store, gpu: GpuSpec | None) -> list[Hit]:
    if gpu is None:
        return []
    if gpu.canonical is None:
        return [_detected_sheet(gpu)]
    hits = store.get("hardware", where={"gpu": gpu.canonical})
    # the rendered sheet (numbers) before the notes (how to use them)
    return sorted(hits, key=lambda h: (h.metadata.get("source") != "hardware/gpus.json", h.id))


def kernel_hits(store: Store, query: str, ops: list[str], k: int) -> list[Hit]:
    """Kernels for the same ops first, then the nearest others."""
    families = sorted({op.lower() for op in ops})
    same_op = store.search(query, k=k, kinds=["kernel"], where={"op": {"$in": families}}) if families else []
    others = store.search(query, k=k + len(same_op), kinds=["kernel"])
    seen = {h.id for h in same_op}
    return same_op + [h for h in others if h.id not in seen][: max(0, k - len(same_op))]


def retrieve_for_task(
    task_source: str,
    ops: list[str],
    gpu: GpuSpec | None,
    budget_chars: int = 12_000,
    store: Store | None = None,
    k_guides: int = 4,
    k_kernels: int = 3,
) -> list[Hit]:
    """Hardware facts for ``gpu``, then guides and prior kernels nearest to the task,
    alternating by rank, as long as their texts fit in ``budget_chars``."""
    store = store or Store()
    if store.count() == 0:  # first use on this machine: embed the shipped corpus
        store.index(corpus_chunks(load_documents()))
    query = task_query(task_source, ops)
    chosen: list[Hit] = []
    used = 0
    for hit in hardware_hits(store, gpu):
        if used + len(hit.text) <= budget_chars * HARDWARE_SHARE:
            chosen.append(hit)
            used += len(hit.text)
    guides = store.search(query, k=k_guides, kinds=["guide"])
    kernels = kernel_hits(store, query, ops, k_kernels)
    for hit in itertools.chain.from_iterable(itertools.zip_longest(guides, kernels)):
        if hit is not None and used + len(hit.text) <= budget_chars:
            chosen.append(hit)
            used += len(hit.text)
    order = {"hardware": 0, "guide": 1, "kernel": 2}
    return sorted(chosen, key=lambda h: order[h.kind])
