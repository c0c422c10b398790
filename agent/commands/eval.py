"""``kforge eval`` and ``kforge hw``: the evaluation engine from the command line.

Imports only kforge.tools (torch), so it runs on a bare GPU box.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ...tools.precision import PRECISIONS
from ...tools.result import Result

# The evaluator, task loading and GPU detection import torch (2-3 s): inside the commands,
# so that `kforge --help` and the commands that need no torch start at once.


def bad_input(message: str) -> typer.Exit:
    Console(stderr=True).print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def resolve_device(device: str | None) -> str:
    """The device to use: as asked, or cuda when one is visible; a clear error otherwise."""
    import torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cuda", "cpu"):
        raise bad_input(f"unknown device {device!r}: use --device cuda or --device cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise bad_input("no CUDA GPU is visible: use --device cpu to verify on the CPU")
    return device


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise bad_input(f"unknown precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    return precision


def register(app: typer.Typer) -> None:
    @app.command("eval")
    def eval_command(
        task_path: Annotated[Path, typer.Argument(metavar="TASK.py", help="KernelBench-format task file")],
        candidate_path: Annotated[
            Path, typer.Argument(metavar="CANDIDATE.py", help="file defining ModelNew")
        ],
        device: Annotated[str | None, typer.Option(help="cuda or cpu (default: cuda when visible)")] = None,
        precision: Annotated[str, typer.Option(help="fp32 (strict), tf32, bf16 or fp16")] = "fp32",
        trials: Annotated[int, typer.Option(min=1, help="correctness trials")] = 5,
        timing_trials: Annotated[int, typer.Option(min=1, help="timed runs per callable")] = 100,
        timeout: Annotated[float, typer.Option(help="seconds before the worker is killed")] = 300.0,
        memory_gb: Annotated[
            float | None,
            typer.Option(min=0.5, help="host memory limit of each worker, GiB (default: 40% of this host's)"),
        ] = None,
        compile_baseline: Annotated[bool, typer.Option(help="also time torch.compile(Model)")] = True,
        ncu: Annotated[bool, typer.Option("--ncu", help="add Nsight Compute metrics")] = False,
        sanitize: Annotated[bool, typer.Option("--sanitize", help="run compute-sanitizer")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="one JSON object on stdout")] = False,
        cache_dir: Annotated[Path | None, typer.Option(help="build and scratch cache")] = None,
    ) -> None:
        """Verify a candidate, check it for cheats, and time it against eager and torch.compile."""
        from ...tools.evaluate import EvalError, EvalOptions, default_cache_dir, evaluate
        from ...tools.task import TaskError, load_task

        try:
            task = load_task(task_path)
        except TaskError as err:
            raise bad_input(str(err)) from None
        if not candidate_path.is_file():
            raise bad_input(f"{candidate_path}: no such candidate file")
        resolved = resolve_device(device)
        options = EvalOptions(
            device=resolved,
            precision=check_precision(precision),
            trials=trials,
            timing_trials=timing_trials if resolved == "cuda" else min(timing_trials, 10),
            timeout_s=timeout,
            compile_baseline=compile_baseline,
            ncu=ncu,
            sanitize=sanitize,
            cache_dir=cache_dir or default_cache_dir(),
        )
        if memory_gb is not None:
            options.memory_limit_gb = memory_gb
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

    @app.command("hw")
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
        table = Table(
            title=Text(f"{gpu.name} ({gpu.canonical or 'not in the spec table'})"), show_header=False
        )
        table.add_row("compute capability", f"{gpu.compute_capability} ({gpu.arch})")
        table.add_row("SMs", str(gpu.sms))
        table.add_row("L2", f"{gpu.l2_bytes / 2**20:.0f} MiB")
        table.add_row("shared memory per block (opt-in)", f"{gpu.smem_per_block_bytes / 1024:.0f} KiB")
        table.add_row("memory", f"{gpu.memory_bytes / 2**30:.0f} GiB at {gpu.peak_gbps or '?'} GB/s peak")
        for dtype, tflops in gpu.tflops.items():
            table.add_row(f"peak {dtype}", f"{tflops} TFLOP/s")
        Console().print(table)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f} ms"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def result_table(task_name: str, candidate_name: str, result: Result) -> Table:
    """The result as a two-column table. Every value is plain ``Text``: names, cheats, notes and
    logs come from the task, the candidate or its worker and are never read as rich markup."""
    colour = {"ok": "green", "rejected": "red", "incorrect": "red"}.get(result.status.value, "yellow")
    table = Table(title=Text(f"{candidate_name} on {task_name}"), show_header=False)
    table.add_row("status", Text(result.status.value, style=colour))
    for label, value in _result_rows(result):
        table.add_row(label, Text(value))
    return table


def _result_rows(result: Result) -> list[tuple[str, str]]:
    rows = [("backend / precision", f"{result.backend} / {result.precision}")]
    if result.cheats:
        rows.append(("cheats", "\n".join(result.cheats)))
    if result.trials:
        rows.append(("correct", f"{result.correct} over {result.trials} trials"))
        rows.append(("max abs / rel error", f"{result.max_abs_err:.2e} / {result.max_rel_err:.2e}"))
    if result.fp64_rel_err is not None:
        rows.append(
            (
                "error vs float64 (candidate / reference)",
                f"{result.fp64_rel_err:.2e} / {result.ref_fp64_rel_err or 0:.2e}",
            )
        )
    if result.candidate:
        spread = f" (IQR {result.candidate.spread:.1%}, {result.candidate.trials} runs)"
        rows.append(("candidate", _ms(result.candidate_ms) + spread))
        rows.append(("eager", _ms(result.eager_ms)))
        rows.append(("torch.compile", _ms(result.compile_ms)))
        rows.append(
            ("speedup vs eager / compile", f"{_x(result.speedup_vs_eager)} / {_x(result.speedup_vs_compile)}")
        )
        rows.append(("timing", result.timing_label))
    if result.roofline:
        roof, fraction = result.roofline, result.roofline_fraction
        at = f", at {fraction:.0%} of it" if fraction is not None else ""
        rows.append(
            ("roofline", f"{roof.bound}-bound, floor {_ms(roof.floor_ms)} on {roof.gpu or 'unknown GPU'}{at}")
        )
    rows += [("note", flag) for flag in result.flags]
    if result.ncu:
        rows.append(("ncu", json.dumps(result.ncu)))
    if result.sanitizer:
        rows.append(("compute-sanitizer", json.dumps(result.sanitizer)))
    if result.status.value != "ok" and result.log:
        rows.append(("log", result.log[-1500:]))
    return rows
