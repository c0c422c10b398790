"""Where a small block's time goes on the host: realistic blocks (development and held-out
sets, never the unseen set) timed as the judge times a candidate (``tools.timing.Timer``: L2
flushed, one call between CUDA events, median of 100), strict fp32, through

- eager PyTorch;
- torch.compile, default mode (Dynamo's guards and Inductor's Python wrapper around the kernels);
- torch.compile with Inductor's C++ wrapper (``options={"cpp_wrapper": True}``): the same
  kernels, launched from compiled C++;
- AOTInductor (``torch.export`` + ``aoti_compile_and_package``, loaded back): no Dynamo at all.

Each output is checked against eager's. Then host microseconds per call of one LayerNorm
through kforge's launch paths, in interleaved rounds (the device's host speed drifts).

    python bench/bench_host_paths.py [--tasks dev/rmsnorm_llama8b,...] [--launch]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import common
import torch
import torch.nn.functional as F
from common import header, print_table
from kforge.tools import norms
from kforge.tools.task import import_file
from kforge.tools.timing import Timer

ROOT = Path(__file__).parent / "realistic"
TASKS = (
    "heldout/layernorm_vit_huge,dev/layernorm_residual_gpt2m,heldout/logits_log_softmax,dev/rmsnorm_llama8b,"
    "dev/rotary_llama8b,dev/dlrm_interaction"
)


def _aoti(model: torch.nn.Module, inputs: list[torch.Tensor]) -> object:
    exported = torch.export.export(model, tuple(inputs))
    path = torch._inductor.aoti_compile_and_package(exported, package_path=tempfile.mktemp(suffix=".pt2"))
    return torch._inductor.aoti_load_package(path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", default=TASKS)
    parser.add_argument("--launch", action="store_true", help="only kforge's launch paths")
    parser.add_argument(
        "--aoti", action="store_true", help="AOTInductor too (it crashed the process on the H100 image)"
    )
    args = parser.parse_args()
    print(header("python bench/bench_host_paths.py " + " ".join(sys.argv[1:])))
    if args.launch:
        launch_paths()
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    timer = Timer(torch.device("cuda"), trials=100)
    rows = []
    for name in args.tasks.split(","):
        assert not name.startswith("unseen/"), "the unseen set is measured by kforge batch only"
        module = import_file(ROOT / f"{name}.py", "task_" + name.replace("/", "_"))
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs()).cuda().eval()
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
        print(f"{name}: built", flush=True)
        paths = {"eager": model, "compile": torch.compile(model)}
        paths["cpp wrapper"] = torch.compile(model, options={"cpp_wrapper": True})
        try:
            if args.aoti:
                paths["AOTInductor"] = _aoti(model, inputs)
        except Exception as e:  # noqa: BLE001 - a model export refuses is reported, not fatal
            print(f"{name}: AOTInductor failed: {type(e).__name__}: {str(e)[:200]}")
        ms, build = {}, {}
        with torch.no_grad():
            ref = model(*inputs)
            for label, fn in paths.items():
                start = time.perf_counter()
                print(f"{name}: {label}", flush=True)
                out = fn(*inputs)
                build[label] = time.perf_counter() - start
                got, want = (out, ref) if isinstance(ref, tuple) else ((out,), (ref,))
                bad = [
                    float((g - w).abs().max())
                    for g, w in zip(got, want, strict=True)
                    if not torch.allclose(g, w, 1e-4, 1e-5)
                ]
                ms[label] = timer.time(lambda fn=fn, x=inputs: fn(*x)).median_ms if not bad else float("nan")
        cells = [f"{ms.get(k, float('nan')):.4f}" for k in ("eager", "compile", "cpp wrapper", "AOTInductor")]
        best = min((v for k, v in ms.items() if k != "eager" and v == v), default=float("nan"))
        print(name, ms, flush=True)
        rows.append((name, *cells, f"{ms['compile'] / best:.2f}x", f"{build.get('cpp wrapper', 0):.0f} s"))
    print_table(
        "realistic blocks timed as the judge times them (L2 flushed, one call between events), median ms",
        ["task", "eager", "compile", "cpp wrapper", "AOTInductor", "best vs compile", "cpp wrapper build"],
        rows,
    )


def launch_paths() -> None:
    dev = "cuda"
    tiny, tw, tb = torch.randn(4, 768, device=dev), torch.ones(768, device=dev), torch.zeros(768, device=dev)
    norms.norm(tiny, None, tw, tb, 1e-5, False)
    meta = next(iter(norms._kernel.chosen.values()))[0]  # the flags and the chosen config
    y = torch.empty_like(tiny)
    args = (tiny, tiny, tw, tb, y, y, 4, 768, 1e-5, 768, 768, 768, 768)
    paths = {
        "F.layer_norm": lambda: F.layer_norm(tiny, (768,), tw, tb, 1e-5),
        "norms.norm (kforge's eager call)": lambda: norms.norm(tiny, None, tw, tb, 1e-5, False),
        "the kernel, Triton's kernel[grid]": lambda: norms.norm_kernel[(4,)](*args, **meta),
        "the kernel, launch.Direct": lambda: norms._kernel.direct((4,), *args, **meta),
        "torch.empty_like": lambda: torch.empty_like(tiny),
    }
    samples: dict[str, list[float]] = {k: [] for k in paths}
    for _ in range(7):
        for label, fn in paths.items():
            samples[label].append(common.host_us(fn, 300, warmup=20))
    print_table(
        "host us per call, LayerNorm 4 x 768 (async calls), 7 interleaved rounds of 300",
        ["path", "median", "min", "max"],
        [(k, *(f"{f(v):.1f}" for f in (statistics.median, min, max))) for k, v in samples.items()],
    )


if __name__ == "__main__":
    main()
