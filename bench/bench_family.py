"""One strategy family measured alone at task level (a batch run with ``--strategies FAMILY``),
task by task beside a full batch's reported result on the same tasks: the family vs eager and
vs torch.compile (each against the baselines of its own run), the full batch's best vs eager,
and what taking the better of the two per task would give. Writes the markdown for
docs/results.md and docs/log/.

    python bench/bench_family.py docs/data/kb-h200-nchw [more family batches ...] \
        --against docs/data/kb-h200-fp32-v3 [--md family.md]

A task measured in two of the family batches is shown once per measurement, and counted once
(its first) in the geomeans. A task the family did not produce a correct candidate for counts
at the full batch's result in "better of both" and is named in the table.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from common import print_table, problem_order, times
from kforge.agent.batch.summary import read_lines
from kforge.tools.fmt import geomean


def _label(line: dict[str, Any]) -> str:
    name = line["task"].split("/")[-1]
    return f"L{line.get('level')} {name}"


def _ok(line: dict[str, Any] | None) -> bool:
    return bool(line) and line["status"] == "ok" and bool(line.get("speedup_vs_eager"))  # type: ignore[index]


def compare(
    family: list[dict[str, Any]], against: dict[str, dict[str, Any]]
) -> tuple[list[list[str]], dict[str, Any]]:
    """Table rows (one per family measurement, in problem order) and the geomeans over the
    first measurement of each task that the full batch also has."""
    rows, seen = [], set()
    fam, ref, both, compile_ratio = [], [], [], []
    beats, failed = 0, []
    for line in sorted(family, key=problem_order):
        other = against.get(line["task"])
        ok = _ok(line)
        mine = line["speedup_vs_eager"] if ok else None
        theirs = other["speedup_vs_eager"] if _ok(other) else None  # type: ignore[index]
        repeat = line["task"] in seen
        if not ok:
            failed.append(_label(line))
        rows.append(
            [
                _label(line) + (" (repeat)" if repeat else ""),
                f"{line['eager_ms']:.3f}" if line.get("eager_ms") else "-",
                f"{line['compile_ms']:.3f}" if line.get("compile_ms") else "-",
                f"{line['eager_ms'] / mine:.3f}" if mine and line.get("eager_ms") else line["status"],
                times(mine),
                times(line.get("speedup_vs_compile") if ok else None),
                f"{times(theirs)} ({other.get('best_strategy') or '-'})" if other else "-",  # type: ignore[union-attr]
            ]
        )
        if repeat or theirs is None:
            continue
        seen.add(line["task"])
        ref.append(theirs)
        both.append(max(theirs, mine or 0.0))
        if mine is not None:
            fam.append(mine)
            compile_ratio.append(line["speedup_vs_compile"])
            beats += mine > theirs
    totals = {
        "tasks": len(ref),
        "family_correct": len(fam),
        "family_vs_eager": geomean(fam),
        "family_vs_compile": geomean(compile_ratio),
        "against_vs_eager": geomean(ref),
        "better_of_both_vs_eager": geomean(both),
        "family_beats_against": beats,
        "no_correct_candidate": failed,
    }
    return rows, totals


COLUMNS = [
    "task",
    "eager ms",
    "compile ms",
    "family ms",
    "family vs eager",
    "family vs compile",
    "full batch's best vs eager",
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folders", type=Path, nargs="+", help="batch folders of the family alone")
    parser.add_argument("--against", type=Path, required=True, help="the full batch to compare with")
    parser.add_argument("--md", type=Path, default=Path("family_tables.md"))
    args = parser.parse_args()
    for folder in [*args.folders, args.against]:
        if not (folder / "results.jsonl").is_file():
            raise SystemExit(f"{folder}: no results.jsonl here; give a folder kforge batch --out wrote")
    family = [line for folder in args.folders for line in read_lines(folder)]
    against = {line["task"]: line for line in read_lines(args.against)}
    rows, t = compare(family, against)
    print_table("family alone vs the full batch", COLUMNS, rows)
    summary = (
        f"{t['tasks']} tasks: the family correct on {t['family_correct']}, {times(t['family_vs_eager'])} vs eager "
        f"and {times(t['family_vs_compile'])} vs torch.compile over those; the full batch {times(t['against_vs_eager'])} "
        f"vs eager over all {t['tasks']}; better of both {times(t['better_of_both_vs_eager'])}; the family beats the "
        f"full batch on {t['family_beats_against']}; no correct candidate: {', '.join(t['no_correct_candidate']) or 'none'}"
    )
    print(summary)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    args.md.write_text("\n".join([*lines, "", summary, ""]))
    print(f"-> {args.md}")


if __name__ == "__main__":
    main()
