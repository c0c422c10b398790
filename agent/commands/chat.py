"""``kforge chat [TASK.py] [--resume RUN]``: an interactive session over the optimization loop."""

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
    app.command("chat")(chat_command)


def chat_command(
    task: Annotated[Path | None, typer.Argument(help="KernelBench-format task file to load first")] = None,
    resume: Annotated[
        str | None, typer.Option(help="continue the session of this run folder (or run id under --out)")
    ] = None,
    rounds: Rounds = None,
    candidates: Candidates = None,
    device: Device = None,
    precision: Precision = None,
    model: Model = None,
    base_url: BaseUrl = None,
    api_key: ApiKey = None,
    timing_trials: TimingTrials = None,
    retrieval: Retrieval = None,
    out: Out = None,
    config: Config = None,
) -> None:
    """Talk to kforge: load a task, approve its plan, run rounds, inspect and save candidates."""
    from ...tools.task import TaskError
    from ..chat.assistant import Assistant
    from ..chat.repl import loop, replay_screen
    from ..chat.session import ChatError, Session
    from ..policy.choose import check_policy
    from ..run import SetupError, find_run, saved_settings
    from ..settings import DEFAULT_OUT, SettingsError, resolve

    flags = dict(
        rounds=rounds, candidates=candidates, device=device, precision=precision, model=model,
        base_url=base_url, api_key=api_key, timing_trials=timing_trials, retrieval=retrieval, out=out,
    )  # fmt: skip
    console = Console(highlight=False)
    try:
        run_dir = find_run(resume, out or DEFAULT_OUT) if resume else None
        settings = resolve(flags, config=config, saved=saved_settings(run_dir) if run_dir else None)
        check_policy(settings)
        session = Session(settings, console)
        if run_dir is not None:
            session.reopen(run_dir)
            replay_screen(session)
            console.print(f"resumed {escape(session.run_id or '')}: /run continues where it stopped")
        elif task is not None:
            session.load(task)
            console.print(
                f"loaded [bold]{escape(session.task.name if session.task else str(task))}[/]"
                f" -> {escape(str(session.run_dir))}"
            )
    except (SetupError, SettingsError, TaskError, ChatError) as err:
        console.print(f"[red]error:[/] {escape(str(err))}", soft_wrap=True)
        raise typer.Exit(1) from None
    assistant = Assistant.from_settings(session, settings) if settings.endpoint_configured else None
    console.print("kforge chat: /help lists the commands, /quit leaves")
    loop(session, assistant)
