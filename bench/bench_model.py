"""``kforge model`` on real models, end to end: for each SPEC, the pipeline (extract, optimize
by share, patch, measure) and one table of what the patched model measured beside eager and
torch.compile (default, reduce-overhead, max-autotune) in the same run.

    python bench/bench_model.py [SPEC ...] [--precision fp32] [--rounds 4] [--candidates 3] [--out DIR]
                              [--compile-modes default,reduce-overhead,max-autotune]

Default SPECs: the example models' full sizes (examples/models/): ResNet-50, ViT-B/16, GPT-2,
Llama (1B dimensions), BERT-base. Each model's folder under --out keeps its manifest, tasks,
runs, patch, e2e.json and report.html.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import header, print_table
from kforge.agent.model.run import ModelOptions, ModelRunError, optimize_model
from kforge.agent.settings import RunSettings

ROOT = Path(__file__).resolve().parents[1]
SPECS = [
    f"{ROOT / 'examples' / 'models' / name}.py:full"
    for name in ("resnet50", "vit_b16", "gpt2", "llama", "bert")
]
COLUMNS = [
    "model", "regions", "won", "kept", "eager ms", "compile", "reduce-overhead", "max-autotune", "patched ms",
    "vs eager", "vs best compile", "predicted", "error vs fp64",
]  # fmt: skip


def ms(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"


def ratio(value: float | None) -> str:
    return f"{value:.3f}x" if value else "-"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("specs", nargs="*", default=SPECS)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--candidates", type=int, default=3)
    parser.add_argument("--min-share", type=float, default=0.03)
    parser.add_argument("--max-regions", type=int, default=None, help="tasks for the N largest regions only")
    parser.add_argument("--out", type=Path, default=Path("kforge-bench-model"))
    parser.add_argument("--strategies", default=None, help="only these strategy families (comma-separated)")
    parser.add_argument(
        "--compile-modes", default="default,reduce-overhead,max-autotune", help="torch.compile baselines"
    )
    args = parser.parse_args()
    print(header(" ".join(["python", *sys.argv])))
    rows = []
    for spec in args.specs:
        name = Path(spec.partition(":")[0]).stem
        settings = RunSettings(
            device=args.device, precision=args.precision, candidates=args.candidates, retrieval=False
        )
        out = args.out / f"{name}-{args.precision}"
        options = ModelOptions(spec=spec, out=out, settings=settings.replace(out=out / "batch" / "runs"))
        options.rounds, options.min_share, options.max_regions = args.rounds, args.min_share, args.max_regions
        options.compile_modes = tuple(args.compile_modes.split(","))
        options.families = tuple(args.strategies.split(",")) if args.strategies else None
        try:
            r = optimize_model(options, say=lambda m: print(m) if isinstance(m, str) else None)
        except ModelRunError as err:
            rows.append([name, f"failed: {str(err).splitlines()[0]}"] + [""] * (len(COLUMNS) - 2))
            continue
        c = r["compile_ms"]
        verified = r.get("verified") or {}
        rows.append([
            name, r["regions_found"], r["regions_won"], r["regions_kept"], ms(r["eager_ms"]),
            ms(c.get("default")), ms(c.get("reduce-overhead")), ms(c.get("max-autotune")),
            ms(r["patched_ms"]), ratio(r["speedup_vs_eager"]), ratio(r["speedup_vs_best_compile"]),
            ratio(r["predicted_speedup"]), f"{verified['error']:.1e}" if "error" in verified else "-",
        ])  # fmt: skip
    print_table(f"kforge model, end to end ({args.precision}, {args.device})", COLUMNS, rows)


if __name__ == "__main__":
    main()
