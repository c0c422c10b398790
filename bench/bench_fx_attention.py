"""The attention rewrite (``fx-rewrite[attention-sdpa]``) against eager and torch.compile:
each task's candidates that carry the rewrite (alone, through torch.compile, with 3xTF32
GEMMs), built by the embedded policy's registry and judged by the evaluator, strict fp32
unless --precision says otherwise.

    python bench/bench_fx_attention.py [TASK.py ...] [--precision fp32] [--device cuda]

Default tasks: examples/tasks/attention.py (no mask), bench/tasks/naive_causal_attention.py
(a causal mask built in the forward: is_causal) and bench/tasks/mingpt_attention.py (minGPT's
mask buffer: a boolean mask).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench_strategies import COLUMNS, measure
from common import header, print_table
from kforge.agent.policy.features import task_features
from kforge.agent.policy.strategies import registry
from kforge.tools.evaluate import EvalOptions
from kforge.tools.task import load_task

ROOT = Path(__file__).resolve().parents[1]
TASKS = [
    ROOT / "examples" / "tasks" / "attention.py",
    ROOT / "bench" / "tasks" / "naive_causal_attention.py",
    ROOT / "bench" / "tasks" / "mingpt_attention.py",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*", type=Path, default=TASKS)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    print(header(" ".join(["python bench/bench_fx_attention.py", *sys.argv[1:]])), flush=True)
    options = EvalOptions(device=args.device, precision=args.precision)
    rows: list[list[object]] = []
    for path in args.tasks:
        task = load_task(path)
        analysis = registry.analyse_task(task, task_features(task, None, args.precision, None))
        if analysis.fx is None or "attention-sdpa" not in analysis.fx[1]:
            rows.append([task.name, "-", "no rewrite: " + "; ".join(analysis.notes), *["-"] * 7])
            continue
        specs = [
            s
            for s in registry.base_specs(analysis, args.precision, args.device)
            if "attention-sdpa" in s.name  # the rewrite alone, through torch.compile, with 3xTF32 GEMMs
        ]
        measure(task, analysis, specs, options, rows)
    print_table(f"attention rewritten to SDPA, {args.precision}", COLUMNS, rows)


if __name__ == "__main__":
    main()
