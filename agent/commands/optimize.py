"""``kforge optimize TASK.py``: run the optimization loop with live progress."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from .options import (
    ApiKey,
    BaseUrl,
    Candidates,
    Config,
    Device,
    Model,
    Out,
    Precision,
    Retrieval,
    Rounds,
    TimingTrials,
)


def register(app: typer.Typer) -> None:
    app.command("optimize")(optimize_command)


def optimize_command(
    task: Annotated[
        Path | None, typer.Argument(help="KernelBench-format task file (not needed with --resume)")
    ] = None,
    rounds: Rounds = None,
    candidates: Candidates = None,
    device: Device = None,
    precision: Precision = None,
    model: Model = None,
    base_url: BaseUrl = None,
    api_key: ApiKey = None,
    temperature: Annotated[float | None, typer.Option(help="sampling temperature")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="completion tokens at most")] = None,
    timeout_s: Annotated[float | None, typer.Option("--timeout", help="seconds per LLM request")] = None,
    retries: Annotated[int | None, typer.Option(help="retries of a failed LLM request")] = None,
    target_speedup: Annotated[
        float | None, typer.Option(help="stop once this speedup over eager is reached")
    ] = None,
    patience: Annotated[
        int | None, typer.Option(help="stop after this many rounds without improvement")
    ] = None,
    wall_time_s: Annotated[
        float | None, typer.Option("--wall-time", help="seconds in the loop at most")
    ] = None,
    timing_trials: TimingTrials = None,
    retrieval: Retrieval = None,
    out: Out = None,
    config: Config = None,
    resume: Annotated[
        str | None, typer.Option(help="continue the run in this folder (or with this id under --out)")
    ] = None,
    quiet: Annotated[bool, typer.Option(help="no live progress")] = False,
    approve: Annotated[
        bool | None, typer.Option("--approve/--no-approve", help="stop for you to approve or edit each plan")
    ] = None,
    choose: Annotated[
        bool | None,
        typer.Option(
            "--choose/--no-choose", help="stop after each round for you to choose what the next builds on"
        ),
    ] = None,
) -> None:
    """Write, verify and measure faster replacements for TASK; the fastest verified one goes to best.py."""
    from ...tools.task import TaskError
    from ..chat.approval import terminal_answers
    from ..events import SLOWER_THAN_EAGER, RichRenderer
    from ..policy.llm import LLMError
    from ..run import RunStopped, SetupError, find_run, optimize, saved_settings
    from ..settings import DEFAULT_OUT, SettingsError, resolve

    flags = dict(
        rounds=rounds, candidates=candidates, device=device, precision=precision, model=model,
        base_url=base_url, api_key=api_key, temperature=temperature, max_tokens=max_tokens,
        timeout_s=timeout_s, retries=retries, target_speedup=target_speedup, patience=patience,
        wall_time_s=wall_time_s, timing_trials=timing_trials, retrieval=retrieval, out=out, approve=approve,
        choose=choose,
    )  # fmt: skip
    console = Console(stderr=True)
    try:
        run_dir = find_run(resume, out or DEFAULT_OUT) if resume else None
        saved = saved_settings(run_dir) if run_dir else None
        settings = resolve(flags, config=config, saved=saved)
        if task is None and run_dir is None:
            raise SetupError("give a task file, or --resume RUN")
        summary = optimize(
            task,
            settings,
            on_event=None if quiet else RichRenderer(console),
            resume=run_dir,
            on_interrupt=terminal_answers(console) if settings.approve or settings.choose else None,
        )
    except (KeyboardInterrupt, RunStopped):
        raise typer.Exit(130) from None  # the renderer (or the store, when quiet) has the run stopped
    except (SetupError, SettingsError, TaskError, LLMError) as err:
        console.print(f"[red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    if summary.status != "finished":
        if quiet:  # otherwise the progress renderer has said it
            console.print(
                f"[red]error:[/] {escape(summary.reason)} (resume with --resume {escape(str(summary.run_dir))})",
                soft_wrap=True,
            )
        raise typer.Exit(1)
    if quiet and summary.best_speedup is not None and summary.best_speedup < 1:  # else the renderer said it
        console.print(
            f"[yellow]note:[/] best.py runs at {summary.best_speedup:.3f}x, {SLOWER_THAN_EAGER}",
            soft_wrap=True,
        )
    typer.echo(str(summary.best_path or summary.run_dir / "report.md"))
