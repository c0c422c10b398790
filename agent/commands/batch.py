"""``kforge batch PATH...``: optimize many tasks (a KernelBench checkout, a folder of task
files, or a list file), one worker per GPU, with live progress, resumable after a kill."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape


def register(app: typer.Typer) -> None:
    app.command("batch")(batch_command)


def _fail(console: Console, message: str) -> typer.Exit:
    console.print(f"[red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def batch_command(
    paths: Annotated[
        list[Path] | None, typer.Argument(help="KernelBench checkout, task folder, task file or list file")
    ] = None,
    level: Annotated[str | None, typer.Option(help="KernelBench levels, e.g. 1 or 1,2")] = None,
    tasks: Annotated[str | None, typer.Option(help="problem ids, e.g. 1,7,12")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="at most N tasks per level, in file order")] = None,
    policy: Annotated[str, typer.Option(help="embedded or llm")] = "embedded",
    device: Annotated[str, typer.Option(help="cuda or cpu")] = "cuda",
    gpus: Annotated[
        str | None, typer.Option(help="GPU indices, one worker each, e.g. 0,1 (default: all)")
    ] = None,
    precision: Annotated[str, typer.Option(help="fp32 (strict), tf32, bf16 or fp16")] = "fp32",
    rounds: Annotated[int, typer.Option(min=1, help="rounds per task")] = 2,
    candidates: Annotated[int, typer.Option(min=1, help="candidates per round")] = 3,
    timing_trials: Annotated[int, typer.Option(min=3, help="timed runs per callable")] = 40,
    strategies: Annotated[
        str | None, typer.Option(help="only these strategy families, e.g. compile-default,cuda-graph")
    ] = None,
    trials: Annotated[int, typer.Option(min=2, help="correctness trials per candidate")] = 5,
    confirm: Annotated[
        bool, typer.Option(help="re-measure each task's best once more (reported figure)")
    ] = True,
    max_time: Annotated[
        float | None, typer.Option(help="start no new task after this many seconds (resume for the rest)")
    ] = None,
    eval_timeout: Annotated[
        float | None,
        typer.Option(help="seconds per evaluation worker (default 300; with --resume: from now on)"),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="batch folder (default kforge-batch)")] = None,
    resume: Annotated[Path | None, typer.Option(help="continue the batch in this folder")] = None,
    ray: Annotated[
        str | None,
        typer.Option(help="run on a Ray cluster: auto or its address (pip install 'kforge\\[ray]')"),
    ] = None,
    config: Annotated[Path | None, typer.Option(help="TOML config (LLM endpoint for --policy llm)")] = None,
    quiet: Annotated[bool, typer.Option(help="no progress bar")] = False,
) -> None:
    """Optimize every selected task; results.jsonl, summary.md and summary.json go in the batch folder.

    Exit code 0 when every task ran, 3 when some task files were invalid (their results.jsonl
    lines say why: status invalid_task), 2 on bad input or while another process runs the folder."""
    from ..batch import BATCH_META, BatchInputError, parse_ints, select
    from ..settings import SettingsError, resolve

    console = Console(stderr=True)
    try:
        if resume is not None:
            if not (resume / BATCH_META).is_file():
                raise BatchInputError(f"{resume}: no batch to resume (no {BATCH_META})")
            saved = json.loads((resume / BATCH_META).read_text())
            selection, policy = saved["selection"], saved["policy"]
            strategies = ",".join(saved.get("families") or []) or None
            trials, confirm = saved.get("trials", trials), saved.get("confirm", confirm)
            ray = ray or saved.get("ray")
            settings = resolve({}, config=config, saved=saved["settings"])
            if eval_timeout is not None:  # tasks already in results.jsonl keep the limit they ran under
                settings = settings.replace(eval_timeout_s=eval_timeout)
            device, precision = settings.device, settings.precision
        else:
            if not paths:
                raise BatchInputError("give task paths (or --resume DIR)")
            selection = {"paths": [str(p) for p in paths], "level": level, "tasks": tasks, "limit": limit}
            flags = dict(
                device=device, precision=precision, rounds=rounds, candidates=candidates, patience=1,
                timing_trials=timing_trials, eval_timeout_s=eval_timeout or 300.0, retrieval=policy == "llm",
            )  # fmt: skip
            _check(policy, device, precision)
            settings = resolve(flags, config=config)
        if policy == "llm" and not settings.endpoint_configured:
            raise BatchInputError("--policy llm needs an endpoint: set OPENAI_BASE_URL or a config file")
        gpu_list = [] if ray else _gpus(gpus, device)
        notes: list[str] = []
        entries = select(
            [Path(p) for p in selection["paths"]],
            parse_ints(selection["level"], "--level"),
            parse_ints(selection["tasks"], "--tasks"),
            selection["limit"],
            notes,
        )
    except (BatchInputError, SettingsError, ValueError, KeyError) as err:
        raise _fail(console, str(err)) from None
    from ..batch import BatchOptions, check_free  # the engine (torch): after the input is checked

    folder = resume or out or Path("kforge-batch")
    try:
        check_free(folder)  # run_batch takes the lock; this says it before anything starts
    except BatchInputError as err:
        raise _fail(console, str(err)) from None
    options = BatchOptions(
        out=folder, settings=settings, policy=policy, gpus=gpu_list, confirm=confirm, selection=selection,
        families=tuple(f.strip() for f in strategies.split(",") if f.strip()) if strategies else None, trials=trials,
        max_time_s=max_time, ray=ray,
    )  # fmt: skip
    workers = f"Ray cluster {ray}" if ray else f"{len(gpu_list) if device == 'cuda' else 1} worker(s)"
    for note in notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    console.print(f"{len(entries)} tasks, {escape(workers)} -> {escape(str(folder))}", soft_wrap=True)
    _run(entries, options, console, quiet)
    _finish(folder, {"policy": policy, "device": device, "precision": precision}, console)


def _finish(folder: Path, meta: dict[str, str], console: Console) -> None:
    """The summary, the report, and the exit code (3 when some task files were invalid)."""
    from ..batch import write_summary
    from ..report import write_report

    overall = write_summary(folder, meta)["overall"]
    console.print(
        f"correct {overall['correct']}/{overall['valid_tasks']}, geomean vs eager "
        f"{overall['geomean_vs_eager'] or 0:.3f}x, vs torch.compile {overall['geomean_vs_compile'] or 0:.3f}x"
    )
    console.print(f"report: {escape(str(write_report(folder)))}")
    typer.echo(str(folder / "summary.md"))
    if overall["invalid_tasks"]:
        console.print(
            f"[yellow]{overall['invalid_tasks']} task file(s) invalid[/]: status invalid_task in results.jsonl"
            " says why (exit code 3)",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(3)


def _gpus(text: str | None, device: str) -> list[int]:
    from ..batch import parse_ints

    listed = parse_ints(text, "--gpus")
    if device == "cpu":
        return []
    import torch

    count = torch.cuda.device_count()
    if count == 0:
        raise ValueError("no CUDA GPU is visible: use --device cpu")
    if listed is None:
        return list(range(count))
    bad = [g for g in listed if g < 0 or g >= count]
    if bad:
        raise ValueError(f"--gpus {bad} not visible ({count} GPUs)")
    return listed


def _check(policy: str, device: str, precision: str) -> None:
    from ...tools.precision import PRECISIONS

    if policy not in ("embedded", "llm"):
        raise ValueError(f"unknown policy {policy!r}: use embedded or llm")
    if device not in ("cuda", "cpu"):
        raise ValueError(f"unknown device {device!r}: use cuda or cpu")
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: choose one of {', '.join(PRECISIONS)}")


def _run(entries: list[Any], options: Any, console: Console, quiet: bool) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..batch import BatchInputError, done_keys, run_batch

    already = len(done_keys(options.out) & {e.key for e in entries})
    counts = {"correct": 0, "faster": 0, "rejected": 0}
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console, disable=quiet) as progress:
        bar = progress.add_task("batch", total=len(entries), completed=already)

        def on_line(line: dict[str, Any]) -> None:
            counts["correct"] += line["status"] == "ok"
            counts["faster"] += (line.get("speedup_vs_eager") or 0.0) > 1.0
            counts["rejected"] += int(line.get("rejected", 0))
            text = f"correct {counts['correct']} | faster {counts['faster']} | rejected {counts['rejected']}"
            progress.update(bar, advance=1, description=text)

        try:
            run_batch(entries, options, on_line)
        except BatchInputError as err:  # the Ray cluster is missing or declares no GPU
            raise _fail(console, str(err)) from None
