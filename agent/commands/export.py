"""``kforge export sft|pairs|groups RUNS... --out DIR``: training datasets from recorded
trajectories (run folders, batch folders or trajectories.db files), as JSONL in the chat
formats TRL reads, split by task, with a card beside each."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape


def register(app: typer.Typer) -> None:
    app.command("export")(export_command)


def export_command(
    kind: Annotated[str, typer.Argument(help="sft, pairs or groups")],
    runs: Annotated[list[Path], typer.Argument(help="run or batch folders, or trajectories.db files")],
    out: Annotated[Path, typer.Option(help="folder for train.jsonl, test.jsonl and the card")],
    test_fraction: Annotated[
        float, typer.Option(min=0.0, max=0.9, help="share of the tasks held out whole for test")
    ] = 0.2,
    min_speedup: Annotated[
        float, typer.Option(min=0.0, help="sft: verified candidates at least this fast vs eager")
    ] = 1.0,
    margin: Annotated[
        float, typer.Option(min=1.0, help="pairs: faster over slower verified by this ratio at least")
    ] = 1.05,
) -> None:
    """Export a dataset; prints the card's path."""
    from ..train.export import KINDS, export
    from ..train.samples import load_samples

    console = Console(stderr=True)
    if kind not in KINDS:
        console.print(f"[red]error:[/] unknown dataset kind {escape(repr(kind))}: one of {', '.join(KINDS)}")
        raise typer.Exit(2)
    try:
        samples = load_samples(runs)
    except FileNotFoundError as err:
        console.print(f"[red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if not samples:
        console.print("[red]error:[/] no evaluated attempts found in the given runs", highlight=False)
        raise typer.Exit(2)
    options = {"sft": {"min_speedup": min_speedup}, "pairs": {"margin": margin}}.get(kind, {})
    folder = export(kind, samples, out, test_fraction=test_fraction, **options)
    typer.echo(str(folder / "README.md"))
