"""KernelBench with the embedded policy: the summary table of each batch folder (titled by
its precision class: strict fp32, tf32 allowed, ...) beside torch.compile (default) and eager
measured in the same runs, and the issue's bar checked on the strict fp32 ones. Writes the
markdown for docs/results.md and docs/log/.

    kforge batch KB --level 1,2,3 --limit 30 --device cuda --out runs/kb-fp32
    python bench/bench_kernelbench.py runs/kb-fp32 [runs/kb-tf32 ...] [--md kernelbench.md]
    python bench/bench_kernelbench.py runs/kb-tf32-a runs/kb-tf32-b --together   # one table of both
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from common import print_table, problem_order, times
from kforge.agent.batch.summary import P_VALUES, read_lines, summary
from kforge.agent.policy.strategies.registry import family_of
from kforge.tools.fmt import geomean

BAR = {"geomean_vs_eager": 1.35, "geomean_vs_compile": 1.15, "fast_vs_eager@1.0": 0.85}


def _f(v: float | None) -> str:
    return f"{v:.2f}" if v is not None else "-"


def rows(groups: dict[str, dict[str, Any]]) -> list[list[str]]:
    out = []
    for name, s in groups.items():
        out.append(
            [
                name,
                f"{s['correct']}/{s['valid_tasks']}",
                "1.000x",
                times(s["compile_geomean_vs_eager"]),
                times(s["best_of_eager_compile_geomean"]),
                times(s["geomean_vs_eager"]),
                times(s["geomean_vs_compile"]),
                " / ".join(_f(s["fast_vs_eager"][str(p)]) for p in P_VALUES),
                " / ".join(_f(s["fast_vs_compile"][str(p)]) for p in P_VALUES),
                str(s["rejected_attempts"]),
                str(s["reported_cheats"]),
                f"{s['time_s'] / 60:.1f}",
            ]
        )
    return out


COLUMNS = [
    "tasks", "correct", "eager", "torch.compile", "best of eager/compile", "kforge vs eager",
    "kforge vs compile", "fast_1/1.5/2 vs eager", "fast_1/1.5/2 vs compile", "rejected", "cheats reported", "min",
]  # fmt: skip


def markdown(title: str, groups: dict[str, dict[str, Any]]) -> list[str]:
    lines = [f"### {title}", "", "| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(groups)]
    return [*lines, ""]


def bar_check(overall: dict[str, Any]) -> list[str]:
    got = {
        "geomean_vs_eager": overall["geomean_vs_eager"],
        "geomean_vs_compile": overall["geomean_vs_compile"],
        "fast_vs_eager@1.0": overall["fast_vs_eager"]["1.0"],
    }
    out = []
    for name, need in BAR.items():
        value = got[name]
        ok = value is not None and value >= need
        shown = f"{value:.3f}" if value is not None else "-"
        out.append(f"- {name}: {shown} (bar {need}) {'met' if ok else 'NOT met'}")
    out.append(f"- cheats among reported results: {overall['reported_cheats']} (bar 0)")
    return out


def _short(line: dict[str, Any]) -> str:
    """L1 12 for a KernelBench problem; the file's name for a task of another set."""
    name = line["task"].split("/")[-1]
    return f"L{line['level']} {name.split('_')[0]}" if line.get("level") else name


def winners(lines: list[dict[str, Any]]) -> list[list[str]]:
    """Which strategy family gave each correct task its reported result: tasks won, their
    geomean speedup vs eager and vs torch.compile, and the tasks (level/problem)."""
    by_family: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        if line["status"] == "ok" and line.get("speedup_vs_eager") and line.get("best_strategy"):
            strategy = line["best_strategy"]  # the task's own module (batch.job.AS_WRITTEN): no family
            by_family.setdefault(strategy if strategy == "as-written" else family_of(strategy), []).append(
                line
            )
    out = []

    for family, won in sorted(by_family.items(), key=lambda kv: -len(kv[1])):
        won = sorted(won, key=problem_order)
        tasks = ", ".join(_short(x) for x in won)
        out.append(
            [
                family,
                str(len(won)),
                times(geomean([x["speedup_vs_eager"] for x in won])),
                times(geomean([x["speedup_vs_compile"] for x in won if x.get("speedup_vs_compile")])),
                tasks,
            ]
        )
    return out


WINNER_COLUMNS = ["best strategy family", "tasks", "vs eager", "vs compile", "which"]


PRECISION_TITLE = {
    "fp32": "strict fp32",
    "tf32": "tf32 allowed",
    "bf16": "bf16 allowed",
    "fp16": "fp16 allowed",
}


def _meta(folder: Path) -> dict:
    return json.loads((folder / "batch.json").read_text()) if (folder / "batch.json").is_file() else {}


def _together(batches: list[tuple[Path, list[dict], dict]]) -> tuple[Path, list[dict], dict]:
    """Several batches as one: the same precision class, no task in two of them."""
    precisions = {meta.get("settings", {}).get("precision", "fp32") for _, _, meta in batches}
    if len(precisions) > 1:
        raise SystemExit(f"--together needs one precision class, got {sorted(precisions)}")
    seen: dict[str, Path] = {}
    for folder, lines, _ in batches:
        for line in lines:
            if line["task"] in seen:
                raise SystemExit(f"--together: {line['task']} is in both {seen[line['task']]} and {folder}")
            seen[line["task"]] = folder
    meta = {
        "settings": batches[0][2].get("settings", {}),
        "tasks": [t for _, _, m in batches for t in m.get("tasks", [])],
        "selection": [m.get("selection") for _, _, m in batches],
    }
    name = Path(" + ".join(str(folder) for folder, _, _ in batches))
    return name, [line for _, lines, _ in batches for line in lines], meta


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folders", type=Path, nargs="+", help="batch folders (each titled by its precision)")
    parser.add_argument("--md", type=Path, default=Path("kernelbench_tables.md"))
    parser.add_argument(
        "--together",
        action="store_true",
        help="one table of all the folders (batches of one precision class over disjoint task sets)",
    )
    args = parser.parse_args()
    md = ["## KernelBench, embedded policy", ""]
    batches = [(f, read_lines(f), _meta(f)) for f in args.folders]
    if args.together:
        batches = [_together(batches)]
    for folder, lines, meta in batches:
        groups = summary(lines)
        precision = meta.get("settings", {}).get("precision", "fp32")
        title = PRECISION_TITLE.get(precision, precision)
        selected = len(meta.get("tasks", [])) or len(lines)
        print_table(f"KernelBench, embedded policy, {title} ({folder})", COLUMNS, rows(groups))
        md += markdown(
            f"{title} ({len(lines)} of {selected} selected tasks measured; selection {meta.get('selection')})",
            groups,
        )
        if precision == "fp32":
            md += ["Bar (strict fp32 only):", *bar_check(groups["overall"]), ""]
        won = winners(lines)
        print_table(f"where the results came from ({folder})", WINNER_COLUMNS, won)
        md += ["| " + " | ".join(WINNER_COLUMNS) + " |", "|" + " --- |" * len(WINNER_COLUMNS)]
        md += ["| " + " | ".join(r) + " |" for r in won] + [""]
    md += [
        "Speedups are geometric means over correct tasks (real speedups, below 1x counted as such); eager and",
        "torch.compile (default mode) are each task's baseline, measured once per task in the same run, under",
        "the batch's precision class (with tf32 allowed, eager runs with TF32 too).",
    ]
    args.md.write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
