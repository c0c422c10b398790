"""The embedded policy's candidates for a task, each judged by the evaluator against eager and
torch.compile: the families whose names match (default: the fusions of #34, 3xTF32 GEMMs and
convolutions with their epilogues and folds), strict fp32 unless --precision says otherwise.

    python bench/bench_strategies.py [TASK.py ...] [--match tf32x3,compile-max-autotune] [--precision fp32] [--alone]
        [--no-compile]

``--alone``: kforge's kernels offered under torch.compile and a CUDA graph are measured run
eagerly too (``registry.kernels_alone``), as the policy's fallback runs them.

Default tasks: bench/tasks/resnet_bottleneck.py (conv + BatchNorm + ReLU folded into one 3xTF32
convolution) and bench/tasks/gpt2_mlp.py (the tanh GELU in the GEMM's epilogue), each beside
torch.compile's max-autotune for reference.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import header, print_table, times
from kforge.agent.policy.features import task_features
from kforge.agent.policy.strategies import registry
from kforge.agent.policy.strategies.source import Spec
from kforge.tools.evaluate import EvalOptions, evaluate_many
from kforge.tools.result import Result
from kforge.tools.task import Task, load_task

ROOT = Path(__file__).resolve().parents[1]
TASKS = [ROOT / "bench" / "tasks" / "resnet_bottleneck.py", ROOT / "bench" / "tasks" / "gpt2_mlp.py"]


COLUMNS = [
    "task",
    "candidate",
    "status",
    "eager ms",
    "compile ms",
    "candidate ms",
    "vs eager",
    "vs compile",
    "fp64 rel err",
    "rejected for",
]


def _row(task: str, name: str, result: Result) -> list[object]:
    def ms(value: float | None) -> str:
        return f"{value:.4f}" if value is not None else "-"

    err = f"{result.fp64_rel_err:.1e}" if result.fp64_rel_err is not None else "-"
    return [task, name, result.status.value, ms(result.eager_ms), ms(result.compile_ms), ms(result.candidate_ms),
            times(result.speedup_vs_eager), times(result.speedup_vs_compile), err,
            "; ".join(result.cheats)[:120]]  # fmt: skip


def measure(
    task: Task,
    analysis: registry.TaskAnalysis,
    specs: list[Spec],
    options: EvalOptions,
    rows: list[list[object]],
) -> None:
    """Judge each spec's candidate; a row per result, printed as it lands (survives a time limit)."""
    names = [s.name for s in specs]

    def done(i: int, result: Result) -> None:
        rows.append(_row(task.name, names[i], result))
        print(" | ".join(str(v) for v in rows[-1]), flush=True)
        if result.status.value not in ("ok", "rejected"):  # why it failed, where a table has no room
            print("\n".join((result.log or "").splitlines()[-12:]), flush=True)

    evaluate_many(task, [registry.build(task, s, analysis) for s in specs], options, on_result=done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*", type=Path, default=TASKS)
    parser.add_argument("--match", default="tf32x3,compile-max-autotune", help="comma-separated name parts")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--alone", action="store_true", help="the composed kernels run eagerly too")
    parser.add_argument("--variants", action="store_true", help="match the specs' tuned variants too")
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="no torch.compile beside each (its compile outlasts the worker)",
    )
    args = parser.parse_args()
    print(header(" ".join(["python bench/bench_strategies.py", *sys.argv[1:]])), flush=True)
    options = EvalOptions(device=args.device, precision=args.precision, compile_baseline=not args.no_compile)
    parts = [p for p in args.match.split(",") if p]
    rows: list[list[object]] = []
    for path in args.tasks:
        task = load_task(path)
        analysis = registry.analyse_task(task, task_features(task, None, args.precision, None))
        pool = registry.base_specs(analysis, args.precision, args.device)
        if args.variants:  # then matched by name like the base specs
            pool += [v for s in pool for v in registry.variants(s, analysis, args.device)]
        specs: list[Spec] = []
        for s in pool:  # the first of each name
            if any(p in s.name for p in parts) and s.name not in {t.name for t in specs}:
                specs.append(s)
        if args.alone:
            specs += [a for a in map(registry.kernels_alone, specs) if a is not None]
        if not specs:
            rows.append([task.name, "-", "no candidate: " + "; ".join(analysis.notes), *["-"] * 7])
            continue
        measure(task, analysis, specs, options, rows)
    print_table(f"the embedded policy's candidates, {args.precision}", COLUMNS, rows)


if __name__ == "__main__":
    main()
