"""The batch summary from ``results.jsonl``: correct rate, fast_p against eager and against
torch.compile, geometric-mean speedups, rejected count and time, overall and per level;
written as ``summary.json``, ``summary.md`` and a plot of the speedup distribution.

Conventions (stated in summary.md too): fast_p is the fraction of all valid tasks (invalid
task files excluded) that are correct and more than p times faster; geometric means are
over correct tasks, each with its real speedup (a best candidate slower than eager counts
below 1x). Where no candidate measured faster than the task's own module, that module is the
answer (strategy ``as-written``): it counts with its measured speedup, about 1x over eager, and
such tasks are counted apart (``as_written``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...tools.fmt import geomean, ratio
from .results import read_results

P_VALUES = (1.0, 1.5, 2.0)
PLOT = "speedups.png"
GEOMEANS = (
    "geomean_vs_eager",
    "geomean_vs_compile",
    "compile_geomean_vs_eager",
    "best_of_eager_compile_geomean",
)


def read_lines(out: Path) -> list[dict[str, Any]]:
    """The batch's whole results lines (a half-written last one is left out, with a warning)."""
    return read_results(out)


def summarise(lines: list[dict[str, Any]]) -> dict[str, Any]:
    valid = [x for x in lines if x["status"] != "invalid_task"]
    correct = [x for x in valid if x["status"] == "ok" and x.get("speedup_vs_eager") is not None]
    n = len(valid)

    def fast(key: str, p: float) -> float | None:
        return sum(1 for x in correct if (x.get(key) or 0.0) > p) / n if n else None

    compile_gains = [x["compile_speedup_vs_eager"] for x in valid if x.get("compile_speedup_vs_eager")]
    return {
        "tasks": len(lines),
        "valid_tasks": n,
        "invalid_tasks": len(lines) - n,
        "correct": len(correct),
        "correct_rate": len(correct) / n if n else None,
        "fast_vs_eager": {str(p): fast("speedup_vs_eager", p) for p in P_VALUES},
        "fast_vs_compile": {str(p): fast("speedup_vs_compile", p) for p in P_VALUES},
        "geomean_vs_eager": geomean([x["speedup_vs_eager"] for x in correct]),
        "geomean_vs_compile": geomean(
            [x["speedup_vs_compile"] for x in correct if x.get("speedup_vs_compile")]
        ),
        "compile_geomean_vs_eager": geomean(compile_gains),
        "best_of_eager_compile_geomean": geomean([max(1.0, g) for g in compile_gains]),
        "rejected_attempts": sum(int(x.get("rejected", 0)) for x in lines),
        "as_written": sum(1 for x in correct if x.get("best_strategy") == "as-written"),
        "reported_cheats": sum(1 for x in correct if (x.get("result") or {}).get("cheats")),
        "statuses": _count(x["status"] for x in lines),
        "time_s": sum(float(x.get("elapsed_s", 0.0)) for x in lines),
    }


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def summary(lines: list[dict[str, Any]]) -> dict[str, Any]:
    levels = sorted({x["level"] for x in lines if x.get("level") is not None})
    result = {"overall": summarise(lines)}
    for level in levels:
        result[f"level{level}"] = summarise([x for x in lines if x.get("level") == level])
    return result


def _pct(v: float | None) -> str:
    return f"{v:.2f}" if v is not None else "-"


def table(groups: dict[str, dict[str, Any]]) -> list[str]:
    rows = [
        "| tasks | valid | correct | fast_1 / 1.5 / 2 vs eager | fast_1 / 1.5 / 2 vs compile | geomean vs eager"
        " | geomean vs compile | torch.compile vs eager | best of eager, compile | rejected attempts | time |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, s in groups.items():
        fe = " / ".join(_pct(s["fast_vs_eager"][str(p)]) for p in P_VALUES)
        fc = " / ".join(_pct(s["fast_vs_compile"][str(p)]) for p in P_VALUES)
        gm = [ratio(s[k], 3) for k in GEOMEANS]
        rows.append(
            f"| {name} ({s['tasks']}) | {s['valid_tasks']} | {_pct(s['correct_rate'])} | {fe} | {fc}"
            f" | {gm[0]} | {gm[1]} | {gm[2]} | {gm[3]} | {s['rejected_attempts']} | {s['time_s'] / 60:.1f} min |"
        )
    return rows


def write_summary(out: Path, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    lines = read_lines(out)
    groups = summary(lines)
    (out / "summary.json").write_text(json.dumps(groups | {"meta": meta or {}}, indent=2))
    plotted = plot(lines, out / PLOT)
    md = ["# kforge batch summary", ""]
    if meta:
        md += [
            f"Policy {meta.get('policy')}, device {meta.get('device')}, precision {meta.get('precision')}.",
            "",
        ]
    md += table(groups)
    md += [
        "",
        "fast_p: fraction of valid tasks that are correct and more than p times faster. Geometric means over",
        "correct tasks with their real speedups (slower than eager counts below 1x). torch.compile (default mode)",
        "and eager are measured once per task in the baseline step of the same run; speedup vs torch.compile is",
        "the candidate's speedup vs eager divided by the baseline's compile-over-eager speedup.",
        "",
        f"Statuses: {json.dumps(groups['overall']['statuses'])}.",
    ]
    if groups["overall"]["as_written"]:
        md += [
            "",
            f"As written: {groups['overall']['as_written']} task(s) where no candidate measured faster than the",
            "task's own module, which is then the answer (strategy as-written, counted with its measured speedup).",
        ]
    if plotted:
        md += ["", f"![speedup distribution]({PLOT})"]
    (out / "summary.md").write_text("\n".join(md) + "\n")
    return groups


def plot(lines: list[dict[str, Any]], path: Path) -> bool:
    vs_eager = [x["speedup_vs_eager"] for x in lines if x["status"] == "ok" and x.get("speedup_vs_eager")]
    vs_compile = [
        x["speedup_vs_compile"] for x in lines if x["status"] == "ok" and x.get("speedup_vs_compile")
    ]
    if not vs_eager:
        return False
    try:
        import matplotlib
    except ImportError:  # optional here: a bare GPU box may lack it; the tables do not need it
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    bins = [2 ** (i / 4) for i in range(-12, 29)]
    ax.hist(vs_eager, bins=bins, alpha=0.6, label="vs eager")
    if vs_compile:
        ax.hist(vs_compile, bins=bins, alpha=0.6, label="vs torch.compile")
    ax.set_xscale("log", base=2)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel("speedup of the best verified candidate")
    ax.set_ylabel("tasks")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
