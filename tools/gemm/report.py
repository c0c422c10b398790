"""The summary line, the speedup plot and the dispatch table of a ``kforge gemm`` run."""

from __future__ import annotations

import math
from pathlib import Path

from .config import HgemmConfig


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _ratio(rows: list[dict[str, str]], num: str, den: str) -> list[float]:
    return [float(r[num]) / float(r[den]) for r in rows]


def table_configs(rows: list[dict[str, str]]) -> dict[tuple[int, int, int], HgemmConfig]:
    """The tuned config of each shape where it beat torch.matmul offline; the dispatcher
    calls torch.matmul for the others."""
    return {
        (int(r["M"]), int(r["N"]), int(r["K"])): HgemmConfig.from_name(r["config"])
        for r in rows
        if float(r["kforge_ms"]) < float(r["torch_ms"])
    }


def summary(rows: list[dict[str, str]]) -> str:
    offline = _ratio(rows, "torch_ms", "kforge_ms")
    wins = sum(s > 1 for s in offline)
    return (
        f"{len(rows)} shapes, every kernel verified; kernel vs torch.matmul geomean "
        f"{geomean(offline):.3f}x offline, {geomean(_ratio(rows, 'torch_server_ms', 'kforge_server_ms')):.3f}x server; "
        f"vs cuBLASLt {geomean(_ratio(rows, 'cublaslt_ms', 'kforge_ms')):.3f}x offline, "
        f"{geomean(_ratio(rows, 'cublaslt_server_ms', 'kforge_server_ms')):.3f}x server; "
        f"faster on {wins}; dispatched (torch.matmul where the kernel lost) {geomean([max(s, 1.0) for s in offline]):.3f}x offline"
        + _vs_best_algo(rows)
    )


def _vs_best_algo(rows: list[dict[str, str]]) -> str:
    """The comparison with cuBLASLt's best heuristic algorithm, for runs that timed it."""
    if not rows or not all(r.get("lt_best_ms") not in (None, "", "nan") for r in rows):
        return ""
    return (
        f"; vs cuBLASLt's best algorithm {geomean(_ratio(rows, 'lt_best_ms', 'kforge_ms')):.3f}x offline, "
        f"{geomean(_ratio(rows, 'lt_best_server_ms', 'kforge_server_ms')):.3f}x server"
    )


def plot(rows: list[dict[str, str]], path: Path, gpu_name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    flops = [2 * int(r["M"]) * int(r["N"]) * int(r["K"]) for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.scatter(flops, _ratio(rows, "torch_ms", "kforge_ms"), s=14, label="offline (back to back)")
    ax.scatter(
        flops,
        _ratio(rows, "torch_server_ms", "kforge_server_ms"),
        s=14,
        marker="x",
        label="server (idle gap, cold L2)",
    )
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("problem size, 2*M*N*K (FLOP)")
    ax.set_ylabel("speedup over torch.matmul")
    ax.set_title(f"kforge gemm, fp16 in / fp32 accumulate / fp16 out, {gpu_name}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
