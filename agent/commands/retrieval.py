"""``kforge index`` and ``kforge search``: build and query the retrieval store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from ...retrieval.store import Store

KINDS = ("hardware", "guide", "kernel")
StoreOpt = Annotated[
    Path | None,
    typer.Option("--store", help="Store folder \\[default: $KFORGE_CACHE/store or ~/.cache/kforge/store]"),
]
ModelOpt = Annotated[
    Path | None,
    typer.Option(
        "--model", help="Local sentence-transformers model folder \\[default: bundled all-MiniLM-L6-v2]"
    ),
]
err = Console(stderr=True)


def _open(store_path: Path | None, model: Path | None) -> Store:
    from ...retrieval import Embedder, RetrievalError, Store

    try:
        store = Store(store_path, Embedder(model))
    except RetrievalError as error:
        err.print(f"[red]kforge:[/red] {escape(str(error))}")
        raise typer.Exit(1) from error
    for notice in store.notices:
        err.print(f"[yellow]kforge:[/yellow] {escape(notice)}")
    return store


def _index(store: Store, quiet: bool = False) -> None:
    from ...retrieval import RetrievalError
    from ...retrieval.corpus import corpus_chunks, load_documents

    try:
        chunks = corpus_chunks(load_documents())
    except RetrievalError as error:
        err.print(f"[red]kforge:[/red] {escape(str(error))}")
        raise typer.Exit(1) from error
    columns = (TextColumn("embedding"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=quiet) as bar:
        task = bar.add_task("embedding", total=None)
        report = store.index(
            chunks, progress=lambda done, total: bar.update(task, completed=done, total=total)
        )
    if not quiet:
        err.print(
            f"{report.total} chunks in {escape(str(store.path))}: {report.embedded} embedded, "
            f"{report.unchanged} unchanged, {report.deleted} deleted ({report.seconds:.1f} s)"
        )


def index(
    rebuild: Annotated[
        bool, typer.Option("--rebuild", help="Drop the store and embed everything again")
    ] = False,
    store_path: StoreOpt = None,
    model: ModelOpt = None,
) -> None:
    """Build or update the retrieval store from the shipped corpus (only changed chunks are embedded)."""
    store = _open(store_path, model)
    if rebuild:
        err.print(f"kforge: rebuilding the store at {escape(str(store.path))}")
        store.rebuild()
    _index(store)


def search(
    query: Annotated[str, typer.Argument(help="What to look for")],
    kind: Annotated[str | None, typer.Option("--kind", help="hardware, guide or kernel")] = None,
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="Keep what is about this GPU or no GPU, e.g. H100-SXM")
    ] = None,
    k: Annotated[int, typer.Option("-k", help="How many results")] = 5,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a JSON list of {id, kind, score, text, metadata}")
    ] = False,
    store_path: StoreOpt = None,
    model: ModelOpt = None,
) -> None:
    """Search the store; it is built first when missing."""
    from ...retrieval import gpu_filter

    if kind is not None and kind not in KINDS:
        raise typer.BadParameter(f"--kind must be one of {', '.join(KINDS)}")
    try:
        where = gpu_filter(gpu) if gpu else None
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    store = _open(store_path, model)
    if store.count() == 0:
        _index(store, quiet=True)
    hits = store.search(query, k=k, kinds=[kind] if kind else KINDS, where=where)
    if as_json:
        typer.echo(json.dumps([h.to_json() for h in hits], indent=2))
        return
    _print_hits(hits)


def _print_hits(hits: list[Any]) -> None:
    out = Console()
    if not hits:
        out.print("no results")
    for hit in hits:
        first = next((ln for ln in hit.text.splitlines()[1:] if ln.strip()), "")
        out.print(f"[bold]{escape(hit.id)}[/bold]  [dim]{escape(hit.kind)}  score {hit.score:.3f}[/dim]")
        out.print(f"  {first[:160]}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("index")(index)
    app.command("search")(search)
