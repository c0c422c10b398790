"""Does moving the shipped ranker toward new trajectories pick better on tasks it has not seen?

The shipped model's training data are not kept, so new runs update it: per family, ridge
regression pulled toward the shipped weights (``ranker.fit_toward``, ``kforge train ranker
--base shipped``). The pull's strength is chosen by leave-one-task-out on the training runs
alone; then the model fit on all of them ranks the test runs' tasks. Per model: how often its
first pick was the best measured family, how often the best was among its first three (a
round's candidates), and the mean regret (log2 of the best speedup over its first pick's).
Only families measured on a task are ranked (which ones were measured depends on the policy
that ran).

    python bench/bench_ranker_update.py --train DEV_RUNS... --test HELDOUT_RUNS... [--strengths 0.3,1,4,16]

RUNS: run or batch folders, trajectories.db files, or .jsonl files of examples (the realistic
sets' are in docs/data/realistic-2026-11-26/*/ranker_examples.jsonl).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from common import header, print_table
from kforge.agent.policy.ranker import Example, RankerModel, fit_toward, fixed_order, load_model
from kforge.agent.policy.ranker_data import load_examples

Order = Callable[[list[str], list[float]], list[str]]


def examples(paths: list[Path]) -> list[Example]:
    """Examples from trajectories (run or batch folders, .db files) or from .jsonl files of
    Example records (how docs/data keeps them)."""
    lines = [p for p in paths if p.suffix == ".jsonl"]
    found = [Example(**json.loads(t)) for p in lines for t in p.read_text().splitlines() if t.strip()]
    return found + load_examples([p for p in paths if p.suffix != ".jsonl"])


def by_task(examples: list[Example]) -> dict[str, list[Example]]:
    tasks: dict[str, list[Example]] = {}
    for ex in examples:
        tasks.setdefault(ex.task, []).append(ex)
    return tasks


def scores(order_for: Callable[[str], Order], tasks: dict[str, list[Example]]) -> tuple[int, int, float]:
    """(first pick best, best in the first three, mean regret) over ``tasks``; ``order_for(task)``
    gives the ordering used for that task (a model fit without it, for leave-one-out)."""
    first, top3, regrets = 0, 0, []
    for task, rows in tasks.items():
        measured = {r.family: r.log2_speedup for r in rows}
        order = order_for(task)(list(measured), rows[0].features)
        best = max(measured.values())
        first += measured[order[0]] == best
        top3 += best in [measured[f] for f in order[:3]]
        regrets.append(best - measured[order[0]])
    return first, top3, statistics.mean(regrets)


def row(name: str, result: tuple[int, int, float], n: int) -> tuple[str, ...]:
    return name, f"{result[0]}/{n}", f"{result[1]}/{n}", f"{result[2]:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", type=Path, nargs="+", required=True)
    parser.add_argument("--test", type=Path, nargs="+", required=True)
    parser.add_argument("--strengths", default="0.1,0.3,1,4,16")
    args = parser.parse_args()
    print(header("python bench/bench_ranker_update.py " + " ".join(sys.argv[1:])))
    base = load_model()
    if base is None:
        raise SystemExit("no shipped ranker model")
    train, test = by_task(examples(args.train)), by_task(examples(args.test))
    if not train or not test:
        raise SystemExit("no embedded-policy trajectories with features in --train or --test")
    strengths = [float(s) for s in args.strengths.split(",")]

    def left_out(strength: float) -> Callable[[str], Order]:
        fits: dict[str, RankerModel] = {}

        def order_for(task: str) -> Order:
            if task not in fits:
                rest = [ex for t, rows in train.items() if t != task for ex in rows]
                fits[task] = fit_toward(base, rest, strength)
            return fits[task].order

        return order_for

    loo = {s: scores(left_out(s), train) for s in strengths}
    chosen = min(strengths, key=lambda s: (loo[s][2], -loo[s][0]))  # least regret, then most first picks
    updated = fit_toward(base, [ex for rows in train.values() for ex in rows], chosen)
    n_train, n_test = len(train), len(test)
    print_table(
        f"Leave one task out on the training runs ({n_train} tasks): the pull's strength",
        ["model", "first pick best", "best in first three", "mean regret (log2)"],
        [row("fixed order", scores(lambda t: lambda f, v: fixed_order(f), train), n_train)]
        + [row("shipped", scores(lambda t: base.order, train), n_train)]
        + [
            row(f"toward the runs, strength {s:g}" + (" (chosen)" if s == chosen else ""), loo[s], n_train)
            for s in strengths
        ],
    )
    print_table(
        f"Test runs ({n_test} tasks, not used to fit or to choose)",
        ["model", "first pick best", "best in first three", "mean regret (log2)"],
        [
            row("fixed order", scores(lambda t: lambda f, v: fixed_order(f), test), n_test),
            row("shipped", scores(lambda t: base.order, test), n_test),
            row(
                f"shipped moved toward the training runs (strength {chosen:g})",
                scores(lambda t: updated.order, test),
                n_test,
            ),
        ],
    )
    for task, rows in sorted(test.items()):
        measured = sorted(((r.family, 2**r.log2_speedup) for r in rows), key=lambda x: -x[1])
        before = base.order([r.family for r in rows], rows[0].features)[:3]
        after = updated.order([r.family for r in rows], rows[0].features)[:3]
        print(
            f"{task}: best {measured[0][0]} ({measured[0][1]:.2f}x eager); shipped {before}; updated {after}"
        )


if __name__ == "__main__":
    main()
