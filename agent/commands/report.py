"""``kforge report BATCH_OR_RUN [--open]``: write the folder's self-contained report.html."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape


def register(app: typer.Typer) -> None:
    app.command("report")(report_command)


def report_command(
    path: Annotated[Path, typer.Argument(help="a batch folder (results.jsonl) or a run folder (run.json)")],
    open_: Annotated[bool, typer.Option("--open", help="open the report in the web browser")] = False,
) -> None:
    """Write report.html (summary, plots, sortable task table; or a run's attempts with code and diffs)."""
    from ..report import write_report

    try:
        target = write_report(path)
    except FileNotFoundError as err:
        Console(stderr=True).print(f"[red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if open_:
        import webbrowser

        webbrowser.open(target.resolve().as_uri())
    typer.echo(str(target))
