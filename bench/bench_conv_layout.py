"""torch.compile with and without Inductor's channels-last layout optimization, on KernelBench
convolution tasks under strict fp32 (GPU).

Why: under strict fp32 (TF32 off, cuDNN's too) cuDNN's channels-last convolutions are slower
than NCHW ones on the H200: the `cudnn-benchmark+channels-last` candidates of the first H200
measurement ran at 0.59-0.81x of eager on the seven conv tasks that tried them. Inductor
converts convolutions to channels-last by its own heuristic (``layout_optimization``, its
multipliers taken from torchbench), and torch.compile trails eager on several conv tasks (L2 4
0.96x, L2 10 0.89x, L3 6 0.89x). Printed per task: eager, torch.compile (default mode) and
torch.compile with ``layout_optimization`` off, timed interleaved with kforge's Timer (CUDA
events, device-wide sync, L2 flushed; medians), their ratios, and each compiled output's
relative L2 error against eager's.

    python bench/bench_conv_layout.py .kb/KernelBench --tasks 2/4,2/10,3/11 [--mode max-autotune-no-cudagraphs]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch
from common import header, kernelbench_tasks, print_table
from kforge.tools.compare import rel_err
from kforge.tools.guards import set_precision_flags
from kforge.tools.task import import_file
from kforge.tools.timing import LocalSlot, Timer

COLUMNS = [
    "task",
    "eager ms",
    "compile ms",
    "compile nchw ms",
    "compile/eager",
    "nchw/eager",
    "nchw/compile",
    "rel err compile",
    "rel err nchw",
]


def select(root: Path, spec: str) -> list[Path]:
    """``2/4,3/11``: level/problem pairs, in the given order."""
    paths = []
    for item in spec.split(","):
        level, number = (int(x) for x in item.split("/"))
        match = [p for p in kernelbench_tasks(root, level) if p.name.split("_")[0] == str(number)]
        if not match:
            raise SystemExit(f"no KernelBench task {item} under {root}: pass the folder that holds level1-3")
        paths += match
    return paths


def label(path: Path) -> str:
    return f"L{path.parent.name[-1]} {path.stem}"


def measure(path: Path, mode: str, trials: int, device: str) -> dict:
    task = import_file(path, f"kforge_task_{path.stem}")
    torch.manual_seed(0)
    with torch.device(device):
        model = task.Model(*task.get_init_inputs())
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    torch._dynamo.reset()
    # torch.compile takes a mode or options, not both: the mode's own options plus ours. A
    # distinct options dict is a distinct backend, so Dynamo keeps the two compilations apart.
    nchw = {**torch._inductor.list_mode_options(mode), "layout_optimization": False}
    variants = {
        "eager": model,
        "compile": torch.compile(model, mode=mode),
        "nchw": torch.compile(model, options=nchw),
    }
    with torch.no_grad():
        ref = model(*inputs)
        outputs, compile_s = {}, {}
        for name in ("compile", "nchw"):
            start = time.perf_counter()
            outputs[name] = variants[name](*inputs)
            compile_s[name] = time.perf_counter() - start
        timer = Timer(torch.device(device), trials=trials)
        entries = {name: LocalSlot(timer, lambda m=m: m(*inputs)) for name, m in variants.items()}
        times = {name: t.median_ms for name, t in timer.time_many(entries).items()}
    return {
        "task": label(path),
        "mode": mode,
        "eager_ms": times["eager"],
        "compile_ms": times["compile"],
        "nchw_ms": times["nchw"],
        "compile_s": compile_s,
        "diff_compile": rel_err(outputs["compile"], ref),
        "diff_nchw": rel_err(outputs["nchw"], ref),
    }


def row(r: dict) -> list[object]:
    if "error" in r:
        return [r["task"], r["error"][:60], "", "", "", "", "", "", ""]
    e, c, n = r["eager_ms"], r["compile_ms"], r["nchw_ms"]
    return [
        r["task"],
        e,
        c,
        n,
        f"{e / c:.3f}x",
        f"{e / n:.3f}x",
        f"{c / n:.3f}x",
        f"{r['diff_compile']:.1e}",
        f"{r['diff_nchw']:.1e}",
    ]


def main() -> None:
    if "--child" in sys.argv:  # one task in its own process: a crash or an OOM ends only it
        _, _, path, mode, trials, device = sys.argv
        set_precision_flags("fp32")
        print(json.dumps(measure(Path(path), mode, int(trials), device)))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "root", type=Path, help="KernelBench checkout (the folder holding level1-3, or its parent)"
    )
    parser.add_argument("--tasks", required=True, help="level/problem pairs, e.g. 2/4,2/10,3/11")
    parser.add_argument("--mode", default="default", help="torch.compile mode for both compiled variants")
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--max-seconds", type=float, default=480, help="start no task after this")
    parser.add_argument(
        "--device", default="cuda", help="cpu only to check this script (CPU times say nothing here)"
    )
    parser.add_argument("--json", type=Path, help="write the rows here as they come")
    args = parser.parse_args()

    print(header(" ".join(sys.argv)), flush=True)
    rows: list[dict] = []
    end = time.monotonic() + args.max_seconds
    for path in select(args.root, args.tasks):
        if time.monotonic() > end:
            print(f"deadline: {path.stem} and later not run", flush=True)
            break
        child = [sys.executable, __file__, "--child", str(path), args.mode, str(args.trials), args.device]
        done = subprocess.run(child, capture_output=True, text=True)
        lines = done.stdout.strip().splitlines()
        try:
            r = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            r = {"task": label(path), "error": f"rc {done.returncode}: {tail}"}
        rows.append(r)
        print(" | ".join(str(v) for v in row(r)), flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    print_table(
        f"torch.compile ({args.mode}) with and without layout_optimization, strict fp32",
        COLUMNS,
        [row(r) for r in rows],
    )


if __name__ == "__main__":
    main()
