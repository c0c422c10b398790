"""``kforge train ranker [RUNS...]``: fit the embedded policy's strategy cost model (CPU)
from recorded trajectories (run folders, batch folders or trajectories.db files)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

train_app = typer.Typer(help="Fit models from recorded trajectories.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(train_app, name="train")


@train_app.command("ranker")
def ranker_command(
    runs: Annotated[
        list[Path] | None, typer.Argument(help="run or batch folders, or trajectories.db files")
    ] = None,
    out: Annotated[
        Path, typer.Option(help="where the model JSON goes (use it with KFORGE_RANKER=PATH)")
    ] = Path("ranker_model.json"),
    synthetic: Annotated[int, typer.Option(min=0, help="add N synthetic tasks (see ranker_synth)")] = 0,
    seed: Annotated[int, typer.Option(help="seed of the synthetic tasks")] = 0,
    ridge: Annotated[float, typer.Option(min=0.0, help="L2 penalty of the per-family regressions")] = 0.3,
    real_weight: Annotated[
        int, typer.Option(min=1, help="measured examples of a prior-fitted family count this many times")
    ] = 1,
    min_measured: Annotated[
        int, typer.Option(min=1, help="families measured this often are fit on measurements alone")
    ] = 5,
) -> None:
    """Fit the strategy ranker; prints how many examples per family it saw."""
    from ..policy.ranker import fit_with_prior
    from ..policy.ranker_data import load_examples
    from ..policy.ranker_synth import synth_tasks, write_store

    console = Console(stderr=True)
    if not runs and synthetic == 0:
        console.print("[red]error:[/] give run folders to learn from, or --synthetic N", highlight=False)
        raise typer.Exit(2)
    sources = [str(p) for p in runs or []]
    try:
        measured = load_examples(runs or [])
    except (FileNotFoundError, ValueError) as err:
        console.print(f"[red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    prior = []
    if synthetic:
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "trajectories.db"
            write_store(db, synth_tasks(synthetic, seed))
            prior = load_examples([db])
        sources.append(f"synthetic: {synthetic} tasks, seed {seed} (kforge.agent.policy.ranker_synth)")
    if not measured and not prior:
        console.print("[red]error:[/] no embedded-policy trajectories with features found", highlight=False)
        raise typer.Exit(2)
    meta = {"sources": sources, "synthetic": synthetic > 0, "real_weight": real_weight}
    model = fit_with_prior(
        measured, prior, ridge=ridge, min_measured=min_measured, measured_weight=real_weight, metadata=meta
    )
    model.save(out)
    for family, count in sorted(model.counts.items()):
        console.print(f"{family}: {count} examples")
    typer.echo(str(out))
