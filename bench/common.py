"""Helpers shared by the benchmarks: example catalog, KernelBench task lists, tables."""

from __future__ import annotations

import datetime
import platform
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def kernelbench_tasks(root: Path, level: int, per_level: int | None = None) -> list[Path]:
    """Task files of one KernelBench level in problem-number order (the selection rule:
    the first ``per_level`` by number, whatever their results)."""
    folder = root / f"level{level}"
    if not folder.is_dir():
        folder = root / "KernelBench" / f"level{level}"
    files = sorted(folder.glob("*.py"), key=lambda p: int(re.match(r"(\d+)", p.name).group(1)))  # type: ignore[union-attr]
    return files[:per_level] if per_level else files


def times(v: float | None) -> str:
    """A speedup as the tables print it: 1.234x, or - where there is none."""
    return f"{v:.3f}x" if v is not None else "-"


def problem_order(line: dict[str, Any]) -> tuple[int, int]:
    """Sort key of a batch results.jsonl line: (level, problem number)."""
    head = line["task"].split("/")[-1].split("_")[0]
    return (line.get("level") or 0, int(head) if head.isdigit() else 0)


def host_us(fn: Any, calls: int, warmup: int = 0) -> float:
    """Host microseconds per call of ``fn`` over ``calls`` asynchronous calls (GPU), after
    ``warmup`` calls; the GPU is synchronised before and after, outside the clock."""
    import time

    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(f"{v:.4g}" if isinstance(v, float) else str(v) for v in row))
    Console(width=160).print(table)


def header(command: str) -> str:
    import torch

    gpu = (
        torch.cuda.get_device_name(0)
        if torch.cuda.is_available()
        else f"no GPU ({platform.processor() or 'cpu'})"
    )
    return f"date {datetime.date.today()} | {gpu} | torch {torch.__version__} | command: {command}"
