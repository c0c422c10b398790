"""Hardware sheets rendered from ``corpus/hardware/gpus.json`` at index time.

The numbers live only in gpus.json (the roofline in ``kforge.tools`` reads the same file);
the hand-written notes in ``corpus/hardware/<CANONICAL>.md`` say how to use them.
"""

from __future__ import annotations

from typing import Any

from ..tools.fmt import num
from .chunking import Document, MetaValue

_DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4")


def _peaks_table(tflops: dict[str, float]) -> str:
    rows = ["| dtype | CUDA cores TFLOP/s | tensor cores TFLOP/s |", "| --- | --- | --- |"]
    for dtype in _DTYPES:
        plain, tensor = tflops.get(dtype), tflops.get(f"{dtype}_tc")
        if plain is None and tensor is None:
            continue
        cells = [num(v, digits=6) for v in (plain, tensor)]
        rows.append(f"| {dtype} | {cells[0]} | {cells[1]} |")
    return "\n".join(rows)


def _ridge_points(spec: dict[str, Any]) -> str:
    """FLOP per byte of DRAM traffic at which a kernel stops being memory-bound."""
    gbps = spec["memory_bandwidth_gbps"]
    parts = []
    for key in ("fp32", "tf32_tc", "bf16_tc", "fp8_tc"):
        if key in spec["tflops"]:
            parts.append(f"{key} {spec['tflops'][key] * 1e3 / gbps:.0f}")
    return "Roofline ridge points (FLOP per DRAM byte): " + ", ".join(parts) + "."


def render_sheet(canonical: str, spec: dict[str, Any]) -> str:
    regs = spec["registers_per_sm"]
    threads = spec["max_threads_per_sm"]
    return "\n".join(
        [
            f"# {spec['vendor_name']} ({canonical})",
            "",
            f"{canonical} is an NVIDIA {spec['family']} GPU, compute capability "
            f"{spec['compute_capability']} ({spec['arch']}). It has {spec['sms']} SMs with a boost "
            f"clock of {spec['boost_clock_mhz']} MHz and at most {threads} resident threads "
            f"({threads // 32} warps) per SM.",
            "",
            "## Memory",
            "",
            f"{num(spec['memory_gb'], digits=6)} GB of {spec['memory_type']} at "
            f"{num(spec['memory_bandwidth_gbps'], digits=6)} GB/s. L2 cache: {num(spec['l2_mb'], digits=6)} MB. "
            f"Shared memory: {spec['smem_per_sm_kb']} KB per SM, up to {spec['smem_per_block_kb']} KB "
            f"per thread block (opt-in above 48 KB). Registers: {regs} 32-bit registers per SM "
            f"({regs * 4 // 1024} KB), at most 255 per thread.",
            "",
            _ridge_points(spec),
            "",
            "## Compute peaks",
            "",
            f"Dense peak throughput of the {canonical} (no sparsity):",
            "",
            _peaks_table(spec["tflops"]),
            "",
            "## Features for kernel writers",
            "",
            *[f"- {feature}" for feature in spec["features"]],
        ]
    )


def hardware_documents(table: dict[str, dict[str, Any]], notes: dict[str, str]) -> list[Document]:
    """One sheet per GPU in ``table``, plus its notes document when ``notes`` has one."""
    docs: list[Document] = []
    for canonical, spec in table.items():
        meta: dict[str, MetaValue] = {
            "gpu": canonical,
            "arch": spec["arch"],
            "family": spec["family"],
            "topic": "hardware",
        }
        title = f"{spec['vendor_name']} ({canonical})"
        sheet = render_sheet(canonical, spec)
        docs.append(
            Document(
                f"hardware/{canonical}", "hardware", title, sheet, {**meta, "source": "hardware/gpus.json"}
            )
        )
        if canonical in notes:
            source = f"hardware/{canonical}.md"
            docs.append(
                Document(
                    f"hardware/{canonical}", "hardware", title, notes[canonical], {**meta, "source": source}
                )
            )
    return docs
