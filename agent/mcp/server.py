"""Wiring: the MCPServer with kforge's tools, resources and prompt for one workspace."""

from __future__ import annotations

from pathlib import Path

from mcp.server.mcpserver import MCPServer

from . import resources, tools
from .runs import Runs
from .workspace import Workspace

INSTRUCTIONS = (
    "kforge writes, verifies and measures faster replacements for PyTorch modules. Give it a "
    "KernelBench-format task (class Model, get_inputs, get_init_inputs) as a workspace path or "
    "as source text: `evaluate` checks a candidate ModelNew, `optimize` searches for one, "
    "`get_best` returns the fastest verified source with its measured result."
)


def build_server(root: Path, out: Path, device: str) -> tuple[MCPServer, Runs]:
    """The server for workspace ``root``; runs go under ``out``. Call ``runs.stop_all()`` at exit."""
    workspace = Workspace(root=root.resolve(), out=out.resolve(), device=device)
    runs = Runs(workspace)
    server = MCPServer(name="kforge", instructions=INSTRUCTIONS, log_level="WARNING")
    tools.register(server, workspace, runs)
    resources.register(server, runs)
    return server, runs
