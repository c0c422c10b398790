"""Where a realistic block's time goes on the GPU: for each task, eager PyTorch, torch.compile
(default mode) and the candidates kforge's embedded policy builds for the families asked for,
each timed as the judge times a candidate (``tools.timing.Timer``: L2 flushed, one call between
CUDA events, median of 100) and profiled (``torch.profiler``, CUDA kernels summed over 20 calls):
the kernels that take the time, so a table says why a strategy wins or loses. Strict fp32.
Development and seen sets only: an unseen set is measured by ``kforge batch`` alone.

    python bench/profile_realistic.py --tasks dev/convnext_block,... [--families tf32x3-conv,tf32x3-gemm+compile,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from common import header, print_table
from kforge.agent.policy.features import task_features
from kforge.agent.policy.strategies import registry
from kforge.tools.task import import_file, load_task
from kforge.tools.timing import Timer

ROOT = Path(__file__).parent / "realistic"
TASKS = "dev/convnext_block,dev/whisper_conv_stem,dev/neox_partial_rotary,dev/efficientnet_mbconv"
CALLS = 20
TOP = 6


def kernels(fn: Any, inputs: list[Any]) -> list[tuple[str, float]]:
    """(kernel name, microseconds per call), largest first, over CALLS profiled calls."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn(*inputs)
        torch.cuda.synchronize()
    total: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            total[event.name] += event.device_time / CALLS
    return sorted(total.items(), key=lambda kv: -kv[1])


RUNNERS = {"compile": "compile", "graph": "cuda-graph", "compile-graph": "compile-graph"}


def candidates(path: Path, families: list[str]) -> dict[str, str]:
    """family -> the source of the embedded policy's candidate of that family for the task;
    ``family+compile``, ``+graph`` or ``+compile-graph``: that family's body under torch.compile,
    a CUDA graph or both (the round-two combinations a batch tries)."""
    task = load_task(path, check_import=False)
    analysis = registry.analyse_task(task, task_features(task, None, "fp32", None))
    specs = {s.family: s for s in registry.base_specs(analysis, "fp32", "cuda")}
    out = {}
    for name in families:
        family, _, runner = name.partition("+")
        if family in specs:
            spec = specs[family]
            if runner:
                spec = dataclasses.replace(spec, family="combo", runner=RUNNERS[runner], mode="default")
            out[name] = registry.build(task, spec, analysis)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", default=TASKS)
    parser.add_argument("--families", default="", help="kforge families to build and profile too")
    args = parser.parse_args()
    print(header("python bench/profile_realistic.py " + " ".join(sys.argv[1:])))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    timer = Timer(torch.device("cuda"), trials=100)
    families = [f for f in args.families.split(",") if f]
    summary = []
    for name in args.tasks.split(","):
        assert not name.startswith("unseen5/"), (
            "an unseen set is measured by kforge batch only (before its first run)"
        )
        path = ROOT / f"{name}.py"
        module = import_file(path, "task_" + name.replace("/", "_"))
        init = module.get_init_inputs()
        torch.manual_seed(0)
        model = module.Model(*init).cuda().eval()
        torch.manual_seed(0)
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
        paths: dict[str, Any] = {"eager": model, "compile": torch.compile(model)}
        for family, source in candidates(path, families).items():
            file = Path(tempfile.mkdtemp()) / f"{path.stem}_{family}.py"
            file.write_text(source)
            torch.manual_seed(0)
            paths[family] = import_file(file, f"cand_{path.stem}_{family}").ModelNew(*init).cuda().eval()
        ms: dict[str, float] = {}
        with torch.no_grad():
            ref = model(*inputs)
            for label, fn in paths.items():
                out = fn(*inputs)
                got, want = (out, ref) if isinstance(ref, tuple) else ((out,), (ref,))
                ok = all(torch.allclose(g, w, 1e-4, 1e-4) for g, w in zip(got, want, strict=True))
                ms[label] = timer.time(lambda fn=fn, x=inputs: fn(*x)).median_ms if ok else float("nan")
                table = kernels(fn, inputs)
                busy = sum(us for _, us in table)
                print_table(
                    f"{name}, {label}: {ms[label]:.4f} ms per call (judge timing), kernels {busy:.1f} us per call",
                    ["kernel", "us per call", "share"],
                    [(k[:90], f"{us:.1f}", f"{us / busy:.0%}") for k, us in table[:TOP]],
                )
        summary.append((name, *(f"{ms.get(k, float('nan')):.4f}" for k in ("eager", "compile", *families))))
    print_table("median ms (judge timing)", ["task", "eager", "compile", *families], summary)


if __name__ == "__main__":
    main()
