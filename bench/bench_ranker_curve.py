"""Learning curve of the strategy ranker: held-out ordering vs the number of trajectories.

Tasks are split once into a held-out quarter and a training pool (by a hash of the name, so
no task is on both sides); the ranker is fit (``fit``, no prior) on the trajectories of the
first N pool tasks in a seeded shuffle, for growing N, and ranks the families measured on each
held-out task. Reported per N, averaged over ``--repeats`` shuffles: how often its first pick
was the best measured family, and the mean regret (log2; 0 is perfect), as in bench_ranker.

    python bench/bench_ranker_curve.py RUNS...            # measured trajectories (run or batch folders)
    python bench/bench_ranker_curve.py --synthetic 800    # ranker_synth's simulated tasks
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from bench_ranker import evaluate
from common import header, print_table
from kforge.agent.policy.ranker import Example, fit, fixed_order
from kforge.agent.policy.ranker_data import load_examples
from kforge.agent.policy.ranker_synth import synth_tasks, write_store
from kforge.agent.train.export import split_tasks


def load(args: argparse.Namespace) -> list[Example]:
    if args.runs:
        return load_examples(args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "trajectories.db"
        write_store(db, synth_tasks(args.synthetic, args.seed))
        return load_examples([db])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", type=Path, nargs="*")
    parser.add_argument("--synthetic", type=int, default=800, help="tasks, when no RUNS are given")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sizes", default="5,10,20,50,100,200,400,600")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    examples = load(args)
    by_task: dict[str, list[Example]] = defaultdict(list)
    for ex in examples:
        by_task[ex.task].append(ex)
    held = split_tasks(list(by_task), 0.25)
    tasks = {(0, t): {e.family: e.log2_speedup for e in by_task[t]} for t in held if len(by_task[t]) > 1}
    vectors = {(0, t): by_task[t][0].features for t in held}
    pool = sorted(t for t in by_task if t not in held)
    if not tasks or not pool:
        sys.exit("too few tasks with two or more measured families to hold some out")
    rows = [("0 (fixed order)", *evaluate(lambda i, f, v: fixed_order(f)[0], tasks, vectors))]
    for size in (int(s) for s in args.sizes.split(",") if int(s) <= len(pool)):
        hits, regrets = [], []
        for repeat in range(args.repeats):
            chosen = random.Random(repeat).sample(pool, size)
            model = fit([e for t in chosen for e in by_task[t]])
            hit, regret = evaluate(lambda i, f, v, m=model: m.order(f, v)[0], tasks, vectors)
            hits.append(hit)
            regrets.append(regret)
        rows.append((str(size), statistics.mean(hits), statistics.mean(regrets)))
    print(header(" ".join(sys.argv)))
    print(f"{len(examples)} examples on {len(by_task)} tasks; {len(tasks)} held-out tasks ranked")
    print_table(
        "ranker learning curve (held-out tasks)",
        ["training trajectories (tasks)", "first pick best", "mean regret (log2)"],
        rows,
    )


if __name__ == "__main__":
    main()
