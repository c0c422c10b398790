"""``kforge mcp``: serve kforge to an IDE agent over the Model Context Protocol."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .options import bad_input, resolve_device


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp_command)


def mcp_command(
    root: Annotated[Path, typer.Option(help="workspace root: path arguments outside it are refused")] = Path(
        "."
    ),
    transport: Annotated[str, typer.Option(help="stdio, or http (streamable HTTP)")] = "stdio",
    host: Annotated[str, typer.Option(help="address to listen on with --transport http")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on with --transport http")] = 8765,
    out: Annotated[
        Path | None, typer.Option(help="folder for runs and batches (default ROOT/kforge-runs)")
    ] = None,
    device: Annotated[str | None, typer.Option(help="cuda or cpu (default: cuda when visible)")] = None,
) -> None:
    """Serve kforge's tools (evaluate, optimize, get_best, ...), runs, corpus and hardware
    sheet to an MCP client such as Claude Code, Cursor, VS Code or Zed."""
    if not root.is_dir():
        raise bad_input(f"{root}: no such folder for --root")
    if transport not in ("stdio", "http"):
        raise bad_input(f"unknown transport {transport!r}: use stdio or http")
    resolved = resolve_device(device)
    try:
        from ..mcp.server import build_server
    except ModuleNotFoundError as err:
        raise bad_input(f"kforge mcp needs {err.name}: pip install 'kforge[mcp]'") from None
    server, runs = build_server(root, out or root / "kforge-runs", resolved)
    try:
        if transport == "stdio":
            server.run("stdio")
        else:
            server.run("streamable-http", host=host, port=port)
    finally:
        runs.stop_all()
