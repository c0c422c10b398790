"""The card beside each exported dataset: counts, tasks per split, speedup distribution."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any


def _speedups(kind: str, rows: list[dict[str, Any]]) -> list[float]:
    if kind == "sft":
        values = [r["speedup"] for r in rows]
    elif kind == "pairs":
        values = [r["chosen_speedup"] for r in rows]
    else:
        values = [c["speedup"] for r in rows for c in r["candidates"]]
    return sorted(v for v in values if v is not None)


def _distribution(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    # inclusive: the quartiles of these values, within [min, max] (exclusive mode extrapolates)
    quartiles = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return {
        "min": values[0],
        "p25": quartiles[0],
        "median": quartiles[1],
        "p75": quartiles[2],
        "max": values[-1],
    }


def card(kind: str, splits: dict[str, list[dict[str, Any]]], sources: list[str]) -> dict[str, Any]:
    return {
        "kind": kind,
        "runs": sources,
        "splits": {
            name: {
                "records": len(rows),
                "tasks": sorted({r["task_name"] for r in rows}),
                "speedup_vs_eager": _distribution(_speedups(kind, rows)),
            }
            for name, rows in splits.items()
        },
    }


def write_card(out: Path, kind: str, splits: dict[str, list[dict[str, Any]]], sources: list[str]) -> None:
    """``card.json`` and a readable ``README.md`` with the same figures."""
    data = card(kind, splits, sources)
    (out / "card.json").write_text(json.dumps(data, indent=2) + "\n")
    lines = [f"# kforge {kind} dataset", "", f"From {len(sources)} runs.", ""]
    lines += [
        "| split | records | tasks | speedup vs eager (min / median / max) |",
        "| --- | --- | --- | --- |",
    ]
    for name, split in data["splits"].items():
        dist = split["speedup_vs_eager"]
        figures = f"{dist['min']:.3g} / {dist['median']:.3g} / {dist['max']:.3g}" if dist else "-"
        lines.append(f"| {name} | {split['records']} | {len(split['tasks'])} | {figures} |")
    for name, split in data["splits"].items():
        lines += ["", f"{name} tasks: {', '.join(split['tasks']) or '(none)'}"]
    (out / "README.md").write_text("\n".join(lines) + "\n")
