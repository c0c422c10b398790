"""Does the strategy ranker pick well on real tasks? Leave-one-task-out over measured runs.

For each task of the given batch or run folders, the ranker is fit without that task (on the
synthetic tasks plus the other measured tasks, those counted ``--real-weight`` times) and
ranks the families that were measured on it. Reported per model: how often its first pick was
the best measured family, and the mean regret (log2 of best measured speedup over the
speedup of its first pick; 0 is perfect). Failed candidates count as a 2x slowdown.

    python bench/bench_ranker.py RUNS... [--join FAMILY_RUNS...] [--synthetic 600 --seed 7 --real-weight 1,30]

--join: batches or runs that measured one family alone (``--strategies compile-nchw``): their
measurements join every ranking of the same task in RUNS (where RUNS did not measure that
family), as well as the training data. Each speedup is against the eager time of its own run.

Rows: the fixed order; synthetic only; measured only; measured with the synthetic prior for
families measured fewer than 5 times (how the shipped model is fit); synthetic plus measured
counted N times for every family (the earlier recipe).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from common import header, print_table
from kforge.agent.policy.ranker import Example, RankerModel, fit, fit_with_prior, fixed_order
from kforge.agent.policy.ranker_data import load_examples
from kforge.agent.policy.ranker_synth import synth_tasks, write_store

Instance = tuple[int, str]  # (index of the RUNS argument, task): one measured ranking
Chooser = Callable[[Instance, list[str], list[float]], str]  # (instance, measured families, features) -> pick


def first_pick_scores(pick: str, measured: dict[str, float]) -> tuple[bool, float]:
    best = max(measured.values())
    return measured[pick] == best, best - measured[pick]


def evaluate(
    choose: Chooser,
    tasks: dict[Instance, dict[str, float]],
    vectors: dict[Instance, list[float]],
) -> tuple[float, float]:
    hits, regrets = [], []
    for instance, measured in tasks.items():
        hit, regret = first_pick_scores(choose(instance, list(measured), vectors[instance]), measured)
        hits.append(hit)
        regrets.append(regret)
    return sum(hits) / len(hits), statistics.mean(regrets)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", type=Path, nargs="+")
    parser.add_argument("--join", type=Path, nargs="*", default=[], help="family-alone batches or runs")
    parser.add_argument("--synthetic", type=int, default=600)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--real-weight", default="1,20", help="comma-separated weights to compare")
    args = parser.parse_args()
    # one ranking instance per task per RUNS argument: the same task measured in two batches is
    # two instances (a family that failed in one and won in the other is not merged into one value)
    per_source = [load_examples([path]) for path in args.runs]
    joined = load_examples(args.join)
    real = [ex for examples in per_source for ex in examples] + joined
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "trajectories.db"
        write_store(db, synth_tasks(args.synthetic, args.seed))
        synthetic = load_examples([db])
    tasks: dict[Instance, dict[str, float]] = defaultdict(dict)
    vectors: dict[Instance, list[float]] = {}
    for source, examples in enumerate(per_source):
        for ex in examples:
            tasks[source, ex.task][ex.family] = ex.log2_speedup
            vectors[source, ex.task] = ex.features
    alone: dict[str, dict[str, float]] = defaultdict(dict)
    for ex in joined:  # the first measurement of a task and family, where two batches both ran it
        alone[ex.task].setdefault(ex.family, ex.log2_speedup)
    for (_, task), measured in tasks.items():
        for family, value in alone.get(task, {}).items():
            measured.setdefault(family, value)
    tasks = {t: m for t, m in tasks.items() if len(m) > 1}  # one measured family: nothing to rank
    if not tasks:
        sys.exit(
            "no task with two or more measured families in RUNS: give batch or run folders with trajectories"
        )

    def held_out(fit_model: Callable[[list[Example]], RankerModel]) -> Chooser:
        """Ranks a task's families with a model fit without that task, in every batch (one fit per task)."""
        cache: dict[str, RankerModel] = {}

        def choose(instance: Instance, families: list[str], vector: list[float]) -> str:
            task = instance[1]
            if task not in cache:
                cache[task] = fit_model([e for e in real if e.task != task])
            return cache[task].order(families, vector)[0]

        return choose

    def mixed(weight: int) -> Chooser:  # synthetic plus measured x weight, every family
        return held_out(lambda others: fit(synthetic + others * weight))

    rows = [("fixed order (no model)", *evaluate(lambda t, f, v: fixed_order(f)[0], tasks, vectors))]
    rows.append(("synthetic only", *evaluate(mixed(0), tasks, vectors)))
    rows.append(
        ("measured only", *evaluate(held_out(lambda others: fit_with_prior(others, [])), tasks, vectors))
    )
    shipped = held_out(lambda others: fit_with_prior(others, synthetic))  # how the shipped model is fit
    rows.append(("measured, synthetic prior for rare families", *evaluate(shipped, tasks, vectors)))
    for w in (int(x) for x in args.real_weight.split(",")):
        rows.append((f"synthetic + measured x{w}", *evaluate(mixed(w), tasks, vectors)))
    print(header(" ".join(sys.argv)))
    names = {task for _, task in tasks}
    print(
        f"{len(real)} measured candidates; {len(tasks)} rankings (a task in one batch) with two or more"
        f" families measured, on {len(names)} tasks"
        + (f"; {len(joined)} of the candidates from --join, on {len(alone)} tasks" if joined else "")
    )
    print_table("ranker, leave one task out", ["model", "first pick best", "mean regret (log2)"], rows)


if __name__ == "__main__":
    main()
