"""``kforge batch PATH...``: optimize many tasks (a KernelBench checkout, a folder of task
files, or a list file), one worker per GPU, with live progress, resumable after a kill."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from .options import Config, Device, Precision, TimingTrials

# The options only batch takes (optimize's and chat's are in options.py).
_Paths = Annotated[
    list[Path] | None, typer.Argument(help="KernelBench checkout, task folder, task file or list file")
]
_Level = Annotated[str | None, typer.Option(help="KernelBench levels, e.g. 1 or 1,2")]
_Tasks = Annotated[str | None, typer.Option(help="problem ids, e.g. 1,7,12")]
_Limit = Annotated[int | None, typer.Option(min=1, help="at most N tasks per level, in file order")]
_Policy = Annotated[str, typer.Option(help="embedded or llm")]
_Gpus = Annotated[str | None, typer.Option(help="GPU indices, one worker each, e.g. 0,1 (default: all)")]
_Rounds = Annotated[int | None, typer.Option(min=1, help="rounds per task (default: 2)")]
_Candidates = Annotated[int | None, typer.Option(min=1, help="candidates per round (default: 3)")]
_Strategies = Annotated[
    str | None, typer.Option(help="only these strategy families, e.g. compile-default,cuda-graph")
]
_Trials = Annotated[int, typer.Option(min=2, help="correctness trials per candidate")]
_Confirm = Annotated[bool, typer.Option(help="re-measure each task's best once more (reported figure)")]
_Finalists = Annotated[
    int,
    typer.Option(
        min=1,
        help="the confirmation re-measures this many of the search's best and keeps the fastest vs torch.compile",
    ),
]
_MaxTime = Annotated[
    float | None, typer.Option(help="start no new task after this many seconds (resume for the rest)")
]
_EvalTimeout = Annotated[
    float | None,
    typer.Option(help="seconds per evaluation worker (default 300; with --resume: from now on)"),
]
_Quiet = Annotated[bool, typer.Option(help="no progress bar")]
_Out = Annotated[Path | None, typer.Option(help="batch folder (default kforge-batch)")]
_Resume = Annotated[Path | None, typer.Option(help="continue the batch in this folder")]
_Ray = Annotated[
    str | None,
    typer.Option(
        help="run on a Ray cluster: auto or its address (pip install 'kforge\\[ray]'; docs/batch.md)"
    ),
]


def register(app: typer.Typer) -> None:
    app.command("batch")(batch_command)


def _fail(console: Console, message: str) -> typer.Exit:
    console.print(f"[red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def batch_command(
    paths: _Paths = None,
    level: _Level = None,
    tasks: _Tasks = None,
    limit: _Limit = None,
    policy: _Policy = "embedded",
    device: Device = None,
    gpus: _Gpus = None,
    precision: Precision = None,
    rounds: _Rounds = None,
    candidates: _Candidates = None,
    timing_trials: TimingTrials = None,
    strategies: _Strategies = None,
    trials: _Trials = 5,
    confirm: _Confirm = True,
    finalists: _Finalists = 3,
    max_time: _MaxTime = None,
    eval_timeout: _EvalTimeout = None,
    out: _Out = None,
    resume: _Resume = None,
    ray: _Ray = None,
    config: Config = None,
    quiet: _Quiet = False,
) -> None:
    """Optimize every selected task; results.jsonl, summary.md and summary.json go in the batch folder.

    Exit code 0 when every task ran, 3 when some task files were invalid (status invalid_task in
    results.jsonl says why), 2 on bad input or a folder in use, 130 when stopped (then --resume)."""
    from ..batch import BatchInputError, parse_ints, select
    from ..batch import resume as choices

    console = Console(stderr=True)
    notes: list[str] = []
    try:
        if resume is not None:
            choice = choices.resumed(resume, config=config, eval_timeout=eval_timeout, ray=ray)
        else:
            flags = dict(device=device, precision=precision, rounds=rounds, candidates=candidates,
                         timing_trials=timing_trials, eval_timeout_s=eval_timeout)  # fmt: skip
            choice = choices.new(
                paths or [], flags, config=config, level=level, tasks=tasks, limit=limit, policy=policy,
                strategies=strategies, trials=trials, confirm=confirm, ray=ray, finalists=finalists,
            )  # fmt: skip
        choices.check_endpoint(choice)
        device = choice.settings.device
        gpu_list = [] if choice.ray else _gpus(gpus, device)
        sel = choice.selection
        levels, ids = parse_ints(sel["level"], "--level"), parse_ints(sel["tasks"], "--tasks")
        entries = select([Path(p) for p in sel["paths"]], levels, ids, sel["limit"], notes)
    except (BatchInputError, ValueError) as err:
        raise _fail(console, str(err)) from None
    folder = resume or out or Path("kforge-batch")
    options = _options(folder, choice, gpu_list, max_time, console)
    for note in notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    workers = f"Ray cluster {choice.ray}" if choice.ray else f"{max(1, len(gpu_list))} worker(s)"
    console.print(f"{len(entries)} tasks, {escape(workers)} -> {escape(str(folder))}", soft_wrap=True)
    _run(entries, options, console, quiet)
    _finish(folder, choice, console)


def _options(folder: Path, choice: Any, gpu_list: list[int], max_time: float | None, console: Console) -> Any:
    """The engine's options (it imports torch: after the input is checked); the folder must be free."""
    from ...tools.output import output_folder
    from ..batch import BatchInputError, BatchOptions, check_free

    try:
        check_free(folder)  # run_batch takes the lock; this says it before anything starts
    except BatchInputError as err:
        raise _fail(console, str(err)) from None
    output_folder(folder)
    return BatchOptions(
        out=folder, settings=choice.settings, policy=choice.policy, gpus=gpu_list, confirm=choice.confirm,
        selection=choice.selection, families=choice.families, trials=choice.trials, max_time_s=max_time,
        ray=choice.ray, finalists=choice.finalists,
    )  # fmt: skip


def _finish(folder: Path, choice: Any, console: Console) -> None:
    """The summary, the report, and the exit code (3 when some task files were invalid)."""
    from ..batch import write_summary
    from ..report import write_report

    meta = {"policy": choice.policy, "device": choice.settings.device, "precision": choice.settings.precision}
    overall = write_summary(folder, meta)["overall"]
    if not (folder / "results.jsonl").is_file():  # --max-time passed before a worker took a task
        console.print(
            f"no task has finished yet: continue with kforge batch --resume {escape(str(folder))}",
            highlight=False,
            soft_wrap=True,
        )
        return
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


def _run(entries: list[Any], options: Any, console: Console, quiet: bool) -> None:
    """Run the batch with a progress bar (a line per task where stderr is not a terminal, as in a
    log); the counts include the tasks a resumed batch had finished. Ctrl-C says how to resume."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..batch import BatchInputError, read_results, run_batch

    keys = {e.key for e in entries}
    done = [line for line in read_results(options.out, warn=False) if line["task"] in keys]
    counts = {"correct": 0, "faster": 0, "rejected": 0}
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    lines = not quiet and not console.is_terminal
    with Progress(*columns, console=console, disable=quiet or lines) as progress:
        bar = progress.add_task("batch", total=len(entries))

        def count(line: dict[str, Any]) -> None:
            counts["correct"] += line["status"] == "ok"
            counts["faster"] += (line.get("speedup_vs_eager") or 0.0) > 1.0
            counts["rejected"] += int(line.get("rejected", 0))
            text = f"correct {counts['correct']} | faster {counts['faster']} | rejected {counts['rejected']}"
            progress.update(bar, advance=1, description=text)

        def on_line(line: dict[str, Any]) -> None:
            count(line)
            if lines:
                speedup = line.get("speedup_vs_eager")
                at = f" {speedup:.3f}x vs eager" if speedup else ""
                where = f"[{int(progress.tasks[0].completed)}/{len(entries)}]"
                console.print(f"{where} {line['task']}: {line['status']}{at}", soft_wrap=True, markup=False)

        for line in done:  # a resumed batch's finished tasks count too
            count(line)
        try:
            run_batch(entries, options, on_line)
        except BatchInputError as err:  # the Ray cluster is missing or declares no GPU
            raise _fail(console, str(err)) from None
        except KeyboardInterrupt:
            progress.stop()
            console.print(
                f"stopped: resume with kforge batch --resume {escape(str(options.out))}", soft_wrap=True
            )
            raise typer.Exit(130) from None
