"""``kforge eval`` and ``kforge hw``: the evaluation engine from the command line.

Imports only kforge.tools (torch), so it runs on a bare GPU box.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ...tools.result import Status
from ..tables import result_table
from .options import Device, bad_input, check_precision, resolve_device

if TYPE_CHECKING:
    from ...tools.evaluate import EvalOptions

# The evaluator, task loading and GPU detection import torch (2-3 s): inside the commands,
# so that `kforge --help` and the commands that need no torch start at once.


# The exit code of `kforge eval` per status: scripts and CI can act on it (2 is bad input).
EXIT_CODES = {
    Status.OK: 0,
    Status.INCORRECT: 1,
    Status.REJECTED: 3,
    Status.FORMAT_ERROR: 4,
    Status.COMPILE_ERROR: 5,
    Status.RUNTIME_ERROR: 6,
    Status.TIMEOUT: 7,
}
EXIT_HELP = ", ".join(f"{code} {status.value}" for status, code in EXIT_CODES.items())


def register(app: typer.Typer) -> None:
    app.command("eval", epilog=f"Exit codes: {EXIT_HELP}; 2 bad input.")(eval_command)
    app.command("hw")(hw_command)


def eval_command(
    task_path: Annotated[Path, typer.Argument(metavar="TASK.py", help="KernelBench-format task file")],
    candidate_path: Annotated[Path, typer.Argument(metavar="CANDIDATE.py", help="file defining ModelNew")],
    device: Device = None,
    precision: Annotated[str, typer.Option(help="fp32 (strict), tf32, bf16 or fp16")] = "fp32",
    trials: Annotated[int, typer.Option(min=1, help="correctness trials")] = 5,
    timing_trials: Annotated[
        int, typer.Option(min=1, help="timed runs per callable (at most 10 on the CPU)")
    ] = 100,
    timeout: Annotated[float, typer.Option(help="seconds before the worker is killed")] = 300.0,
    memory_gb: Annotated[
        float | None,
        typer.Option(min=0.5, help="host memory limit of each worker, GiB (default: 40% of this host's)"),
    ] = None,
    compile_baseline: Annotated[
        bool | None, typer.Option(help="also time torch.compile(Model) (default: on a GPU; minutes on a CPU)")
    ] = None,
    ncu: Annotated[bool, typer.Option("--ncu", help="add Nsight Compute metrics (GPU)")] = False,
    sanitize: Annotated[bool, typer.Option("--sanitize", help="run compute-sanitizer (GPU)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object on stdout")] = False,
    cache_dir: Annotated[Path | None, typer.Option(help="build and scratch cache")] = None,
) -> None:
    """Verify a candidate, check it for cheats, and time it against eager and torch.compile."""
    from ...tools.evaluate import EvalError, evaluate
    from ...tools.task import TaskError, load_task

    try:
        task = load_task(task_path)
    except TaskError as err:
        raise bad_input(str(err)) from None
    if not candidate_path.is_file():
        raise bad_input(f"{candidate_path}: no such candidate file")
    resolved = resolve_device(device)
    if resolved != "cuda" and (ncu or sanitize):
        raise bad_input(f"{'--ncu' if ncu else '--sanitize'} profiles CUDA kernels: it needs --device cuda")
    options = _options(
        resolved, precision, trials, timing_trials, timeout, memory_gb, compile_baseline, cache_dir
    )
    options.ncu, options.sanitize = ncu, sanitize
    console = Console(stderr=True)
    try:
        with console.status(f"evaluating {escape(candidate_path.name)} on {resolved}", spinner="dots"):
            result = evaluate(task, candidate_path.read_text(), options)
    except EvalError as err:
        raise bad_input(str(err)) from None
    if as_json:
        typer.echo(json.dumps(result.to_json()))
    else:
        Console().print(result_table(task.name, candidate_path.name, result))
    raise typer.Exit(EXIT_CODES.get(result.status, 1))


def _options(
    device: str,
    precision: str,
    trials: int,
    timing_trials: int,
    timeout: float,
    memory_gb: float | None,
    compile_baseline: bool | None,
    cache_dir: Path | None,
) -> EvalOptions:
    from ...tools.evaluate import EvalOptions, default_cache_dir

    options = EvalOptions(
        device=device,
        precision=check_precision(precision),
        trials=trials,
        timing_trials=timing_trials if device == "cuda" else min(timing_trials, 10),
        timeout_s=timeout,
        compile_baseline=device == "cuda" if compile_baseline is None else compile_baseline,
        cache_dir=cache_dir or default_cache_dir(),
    )
    if memory_gb is not None:
        options.memory_limit_gb = memory_gb
    return options


def hw_command(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The detected GPU and its spec, and which containment layers this host gives workers."""
    from ...tools.contain import probe
    from ...tools.hardware import detect_gpu

    gpu, layers = detect_gpu(), probe()
    if as_json:
        typer.echo(json.dumps((gpu.to_json() if gpu else {"gpu": None}) | {"containment": layers}))
        return
    contained = Table(title=Text("worker containment on this host"), show_header=False)
    for line in layers:
        layer, _, state = line.partition(": ")
        contained.add_row(layer, Text(state, style="red" if "NOT contained" in state else ""))
    Console().print(contained)
    if gpu is None:
        typer.echo("no CUDA GPU detected (kforge can still verify on the CPU with --device cpu)")
        return
    table = Table(title=Text(f"{gpu.name} ({gpu.canonical or 'not in the spec table'})"), show_header=False)
    table.add_row("compute capability", f"{gpu.compute_capability} ({gpu.arch})")
    table.add_row("SMs", str(gpu.sms))
    table.add_row("L2", f"{gpu.l2_bytes / 2**20:.0f} MiB")
    table.add_row("shared memory per block (opt-in)", f"{gpu.smem_per_block_bytes / 1024:.0f} KiB")
    table.add_row("memory", f"{gpu.memory_bytes / 2**30:.0f} GiB at {gpu.peak_gbps or '?'} GB/s peak")
    for dtype, tflops in gpu.tflops.items():
        table.add_row(f"peak {dtype}", f"{tflops} TFLOP/s")
    Console().print(table)
