"""Spread: one candidate evaluated five times, each in a fresh worker. The spread of the
five medians, (max - min) / median, should be under 2%.

    python bench/bench_spread.py [TASK.py CANDIDATE.py] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from common import header, print_table
from kforge.examples import ROOT as EXAMPLES
from kforge.tools.evaluate import EvalOptions, evaluate
from kforge.tools.task import load_task


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("task", type=Path, nargs="?", default=EXAMPLES / "tasks/softmax.py")
    parser.add_argument("candidate", type=Path, nargs="?", default=EXAMPLES / "candidates/softmax_triton.py")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    task = load_task(args.task)
    options = EvalOptions(device="cuda", compile_baseline=False, cache_dir=Path(tempfile.mkdtemp()))
    rows, medians = [], []
    for run in range(args.runs):
        result = evaluate(task, args.candidate.read_text(), options)
        if result.candidate is None:
            raise SystemExit(f"run {run + 1}: {result.status.value}\n{result.log}")
        medians.append(result.candidate.median_ms)
        rows.append((run + 1, result.candidate.median_ms, result.candidate.iqr_ms, result.eager_ms))
    spread = (max(medians) - min(medians)) / statistics.median(medians)
    print(header(" ".join(sys.argv)))
    print_table(
        f"{args.candidate.name}: {args.runs} evaluations", ["run", "median ms", "IQR ms", "eager ms"], rows
    )
    print(f"spread of the medians (max-min)/median: {spread:.2%}")


if __name__ == "__main__":
    main()
