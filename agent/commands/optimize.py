"""``kforge optimize TASK.py``: run the optimization loop with live progress."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

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

# The options only optimize takes (those it shares with chat and batch are in options.py).
_Task = Annotated[Path | None, typer.Argument(help="KernelBench-format task file (not needed with --resume)")]
_Temperature = Annotated[float | None, typer.Option(help="sampling temperature")]
_MaxTokens = Annotated[int | None, typer.Option(help="completion tokens at most")]
_TimeoutS = Annotated[float | None, typer.Option("--timeout", help="seconds per LLM request")]
_Retries = Annotated[int | None, typer.Option(help="retries of a failed LLM request")]
_TargetSpeedup = Annotated[float | None, typer.Option(help="stop once this speedup over eager is reached")]
_Patience = Annotated[int | None, typer.Option(help="stop after this many rounds without improvement")]
_WallTimeS = Annotated[float | None, typer.Option("--wall-time", help="seconds in the loop at most")]
_Resume = Annotated[
    str | None, typer.Option(help="continue the run in this folder (or with this id under --out)")
]
_Quiet = Annotated[bool, typer.Option(help="no live progress")]
_Approve = Annotated[
    bool | None, typer.Option("--approve/--no-approve", help="stop for you to approve or edit each plan")
]
_Choose = Annotated[
    bool | None,
    typer.Option(
        "--choose/--no-choose", help="stop after each round for you to choose what the next builds on"
    ),
]


def register(app: typer.Typer) -> None:
    app.command("optimize")(optimize_command)


def optimize_command(
    task: _Task = None,
    rounds: Rounds = None,
    candidates: Candidates = None,
    device: Device = None,
    precision: Precision = None,
    model: Model = None,
    base_url: BaseUrl = None,
    api_key: ApiKey = None,
    temperature: _Temperature = None,
    max_tokens: _MaxTokens = None,
    timeout_s: _TimeoutS = None,
    retries: _Retries = None,
    target_speedup: _TargetSpeedup = None,
    patience: _Patience = None,
    wall_time_s: _WallTimeS = None,
    timing_trials: TimingTrials = None,
    retrieval: Retrieval = None,
    out: Out = None,
    config: Config = None,
    resume: _Resume = None,
    quiet: _Quiet = False,
    approve: _Approve = None,
    choose: _Choose = None,
) -> None:
    """Write, verify and measure faster replacements for TASK; the fastest verified one goes to best.py."""
    from ...tools.task import TaskError
    from ..chat.approval import terminal_answers
    from ..events import RichRenderer
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
    _finish(summary, console, quiet)


def _finish(summary: Any, console: Console, quiet: bool) -> None:
    """What the progress renderer says at the end when it was off (--quiet), the exit code, and
    the path of best.py (or of the report) on stdout."""
    from ..events import SLOWER_THAN_EAGER

    if summary.status != "finished":
        if quiet:
            where = escape(str(summary.run_dir))
            console.print(
                f"[red]error:[/] {escape(summary.reason)} (resume with --resume {where})", soft_wrap=True
            )
        raise typer.Exit(1)
    if quiet and summary.best_speedup is not None and summary.best_speedup < 1:
        console.print(
            f"[yellow]note:[/] best.py runs at {summary.best_speedup:.3f}x, {SLOWER_THAN_EAGER}",
            soft_wrap=True,
        )
    typer.echo(str(summary.best_path or summary.run_dir / "report.md"))
