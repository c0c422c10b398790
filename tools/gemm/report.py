"""The summary line and the dispatch table of a ``kforge gemm`` run (the CLI draws the plot)."""

from __future__ import annotations

from ..fmt import geomean, ratio
from .config import HgemmConfig


def ratios(rows: list[dict[str, str]], num: str, den: str) -> list[float]:
    """Per row, column ``num`` over column ``den`` (a speedup when both are times)."""
    return [float(r[num]) / float(r[den]) for r in rows]


def table_configs(rows: list[dict[str, str]]) -> dict[tuple[int, int, int], HgemmConfig]:
    """The tuned config of each shape where it beat torch.matmul offline; the dispatcher
    calls torch.matmul for the others."""
    return {
        (int(r["M"]), int(r["N"]), int(r["K"])): HgemmConfig.from_name(r["config"])
        for r in rows
        if float(r["kforge_ms"]) < float(r["torch_ms"])
    }


def _geo(values: list[float]) -> str:
    """The geometric mean as '1.234x', '-' for no rows."""
    return ratio(geomean(values), decimals=3)


def summary(rows: list[dict[str, str]]) -> str:
    offline = ratios(rows, "torch_ms", "kforge_ms")
    wins = sum(s > 1 for s in offline)
    return (
        f"{len(rows)} shapes, every kernel verified; kernel vs torch.matmul geomean "
        f"{_geo(offline)} offline, {_geo(ratios(rows, 'torch_server_ms', 'kforge_server_ms'))} server; "
        f"vs cuBLASLt {_geo(ratios(rows, 'cublaslt_ms', 'kforge_ms'))} offline, "
        f"{_geo(ratios(rows, 'cublaslt_server_ms', 'kforge_server_ms'))} server; "
        f"faster on {wins}; dispatched (torch.matmul where the kernel lost) {_geo([max(s, 1.0) for s in offline])} offline"
        + _vs_best_algo(rows)
    )


def _vs_best_algo(rows: list[dict[str, str]]) -> str:
    """The comparison with cuBLASLt's best heuristic algorithm, for runs that timed it."""
    if not rows or not all(r.get("lt_best_ms") not in (None, "", "nan") for r in rows):
        return ""
    return (
        f"; vs cuBLASLt's best algorithm {_geo(ratios(rows, 'lt_best_ms', 'kforge_ms'))} offline, "
        f"{_geo(ratios(rows, 'lt_best_server_ms', 'kforge_server_ms'))} server"
    )
