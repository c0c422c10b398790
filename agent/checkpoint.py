"""The run's graph over its checkpoints: ``checkpoint.db`` in the run folder, LangGraph's SQLite
checkpointer (thread id = run id). ``optimize`` runs the graph through it; a chat session reads
and updates the same state through it."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph.state import CompiledStateGraph

from .context import RunContext
from .graph import build_graph
from .state import RunInput, State

Graph = CompiledStateGraph[State, RunContext, RunInput, State]


@contextlib.contextmanager
def open_graph(run_dir: Path) -> Iterator[Graph]:
    """The compiled graph checkpointing to ``run_dir/checkpoint.db``; the connection closes on exit."""
    conn = sqlite3.connect(run_dir / "checkpoint.db", check_same_thread=False)
    try:
        yield build_graph().compile(checkpointer=SqliteSaver(conn))
    finally:
        conn.close()
