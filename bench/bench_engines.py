"""Two versions of the evaluation engine on the same candidates: did a change move a speedup?

Each candidate is evaluated by this checkout's kforge (``new``) and by other checkouts
(``--engine NAME=PATH``, e.g. ``git worktree add /tmp/kf-old 016a0b6``; a variant with one
change taken back is how to find which change moved a time), each evaluation in a fresh
process, in the order given by ``--arms`` (per task; ``warm-up`` is this checkout's
evaluation, discarded: it fills Inductor's on-disk cache so that no arm pays a cold
torch.compile). Candidates are the
embedded policy's proposals of one strategy family for the KernelBench tasks given, built
here, so both engines time the same source.

    python bench/bench_engines.py KERNELBENCH_DIR --engine old=/tmp/kf-old --tasks 3/9,3/22 \\
        [--family cuda-graph] [--arms warm-up,new,old,old,new]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import header, kernelbench_tasks, print_table
from kforge.agent.policy.features import task_features
from kforge.agent.policy.strategies.registry import analyse_task, base_specs, build
from kforge.tools.task import load_task

ONE = r"""
import json, sys
from pathlib import Path
from kforge.tools.evaluate import EvalOptions, evaluate
from kforge.tools.task import load_task
options = EvalOptions(device="cuda", timing_trials=40, cache_dir=Path(sys.argv[3]))
r = evaluate(load_task(Path(sys.argv[1])), Path(sys.argv[2]).read_text(), options)
host = [line for line in r.log.splitlines() if line.startswith("timing host")]
print("RESULT " + json.dumps([r.status.value, r.eager_ms, r.compile_ms, r.candidate_ms, host]))
"""


def candidate(task_file: Path, family: str) -> str:
    """The embedded policy's proposal of ``family`` for this task (fp32, on a GPU)."""
    task = load_task(task_file)
    analysis = analyse_task(task, task_features(task, None, "fp32", None))
    spec = next((s for s in base_specs(analysis, "fp32", "cuda") if s.family == family), None)
    if spec is None:
        raise SystemExit(
            f"{task_file.stem}: the embedded policy proposes no {family} here; pick another --family"
        )
    return build(task, spec, analysis)


def evaluate_in(tree: Path | None, task_file: Path, source: Path) -> list:
    """One evaluation in a fresh process, by the kforge at ``tree`` (None: this checkout's)."""
    env = dict(os.environ)
    if tree is not None:  # a folder that holds the other checkout under the name kforge
        link = Path(tempfile.mkdtemp()) / "kforge"
        link.symlink_to(tree.resolve())
        env["PYTHONPATH"] = str(link.parent)
    done = subprocess.run(
        [sys.executable, "-c", ONE, str(task_file), str(source), tempfile.mkdtemp()],
        capture_output=True,
        text=True,
        env=env,
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{task_file.stem}: the evaluation failed:\n{done.stderr[-2000:]}")
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kernelbench", type=Path)
    parser.add_argument("--engine", action="append", default=[], help="NAME=PATH of another kforge checkout")
    parser.add_argument("--tasks", default="3/9,3/20,3/22,3/24", help="KernelBench level/problem")
    parser.add_argument("--family", default="cuda-graph")
    parser.add_argument("--arms", default="warm-up,new,old,old,new")
    args = parser.parse_args()
    engines: dict[str, Path | None] = {"new": None, "warm-up": None}
    engines |= {name: Path(path) for name, _, path in (e.partition("=") for e in args.engine)}
    unknown = [arm for arm in args.arms.split(",") if arm not in engines]
    if unknown:
        raise SystemExit(f"arms {unknown} name no engine: give each as --engine NAME=PATH")
    print(header(" ".join(sys.argv)))
    scratch = Path(tempfile.mkdtemp())
    rows = []
    for item in args.tasks.split(","):
        level, number = item.split("/")
        task_file = next(
            f for f in kernelbench_tasks(args.kernelbench, int(level)) if f.name.split("_")[0] == number
        )
        source = scratch / f"{task_file.stem}.py"
        source.write_text(candidate(task_file, args.family))
        for arm in args.arms.split(","):
            status, eager, compiled, cand, host = evaluate_in(engines[arm], task_file, source)
            row = (task_file.stem, arm, status, eager, compiled, cand)
            row += (eager / cand if cand else "-", compiled / cand if cand and compiled else "-")
            print(row, host, flush=True)
            if arm != "warm-up":
                rows.append(row)
    print_table(
        f"{args.family} candidates timed by each engine (new: this checkout), a fresh process each",
        ["task", "engine", "status", "eager ms", "compile ms", "candidate ms", "vs eager", "vs compile"],
        rows,
    )


if __name__ == "__main__":
    main()
