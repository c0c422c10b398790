"""Where eager PyTorch spends a KernelBench task's forward, from Nsight Compute (GPU).

For each task, one forward of the reference Model (after three warm-up forwards, under the
precision class's flags: strict fp32 turns TF32 off, cuDNN's too) runs inside the NVTX range
that kforge's profiler reads, under ncu with the same metrics as ``kforge eval --ncu``.
Printed per task: the forward's GPU time over its kernels, time-weighted SM and DRAM
throughput, and the longest kernels with their share. This is the profile behind "where eager
already sits" in docs/results.md.

    python bench/profile_kernelbench.py .kb/KernelBench --level 2 --tasks 1,2,4,10 [--limit 30]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from common import header, kernelbench_tasks, print_table
from kforge.tools.profile import _ncu_rows, ncu_available, ncu_command, summarize_ncu


def child(path: Path, precision: str) -> None:
    """The profiled process: warm up, then one forward inside the kforge_profile range."""
    import torch
    from kforge.tools.guards import set_precision_flags
    from kforge.tools.task import import_file

    set_precision_flags(precision)
    task = import_file(path, "kforge_task")
    with torch.device("cuda"):
        torch.manual_seed(0)
        model = task.Model(*task.get_init_inputs())
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("kforge_profile")
        model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


def profile(path: Path, precision: str, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "ncu.csv"
        command = [
            *ncu_command(log),
            sys.executable,
            __file__,
            "--child",
            str(path),
            "--precision",
            precision,
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"error": f"ncu took over {timeout_s:.0f} s"}
        rows = _ncu_rows(log.read_text(errors="replace") if log.exists() else "")
        if not rows:
            return {"error": "no kernels profiled: " + (done.stderr or done.stdout)[-300:].replace("\n", " ")}
        return summarize_ncu(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "root", type=Path, nargs="?", help="a KernelBench checkout (or its KernelBench/ folder)"
    )
    parser.add_argument("--level", type=int, default=2)
    parser.add_argument("--tasks", default="", help="problem numbers, e.g. 1,2,4 (default: all)")
    parser.add_argument("--limit", type=int, default=30, help="the first N problems of the level")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per task under ncu")
    parser.add_argument("--json", type=Path, help="also write every task's summary here")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.precision)
        return
    if args.root is None:
        sys.exit("give a KernelBench checkout: python bench/profile_kernelbench.py PATH [--level N]")
    if not ncu_available():
        sys.exit("ncu is not on PATH: run this on the GPU machine")
    wanted = {int(t) for t in args.tasks.split(",") if t.strip()}
    tasks = [
        p
        for p in kernelbench_tasks(args.root, args.level, args.limit)
        if not wanted or int(re.match(r"(\d+)", p.name).group(1)) in wanted  # type: ignore[union-attr]
    ]
    print(header(" ".join(sys.argv)))
    rows, everything = [], {}
    for path in tasks:
        summary = profile(path, args.precision, args.timeout)
        everything[path.stem] = summary
        if args.json:  # written after every task: a call cut short keeps what it profiled
            args.json.write_text(json.dumps(everything, indent=1))
        if "error" in summary:
            rows.append((path.stem[:40], "-", "-", "-", "-", summary["error"][:100]))
            print(" | ".join(rows[-1]), flush=True)
            continue
        longest = "; ".join(
            f"{k['name'][:48]} {k['share_pct']:.0f}% (SM {k['sm_throughput_pct']:.0f}, DRAM {k['dram_throughput_pct']:.0f})"
            for k in summary["top_kernels"][:2]
        )
        rows.append(
            (
                path.stem[:40],
                f"{summary['gpu_time_ns'] / 1e6:.3f}",
                str(summary["kernels"]),
                f"{summary['sm_throughput_pct']:.0f}",
                f"{summary['dram_throughput_pct']:.0f}",
                longest,
            )
        )
        print(" | ".join(rows[-1]), flush=True)  # as it goes; the table follows at the end
    print_table(
        f"eager forward under ncu, level {args.level}, {args.precision} (throughputs: % of peak, time-weighted)",
        ["task", "GPU ms", "kernels", "SM %", "DRAM %", "longest kernels (share, SM %, DRAM %)"],
        rows,
    )


if __name__ == "__main__":
    main()
