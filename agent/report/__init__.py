"""What kforge reports: a run's ``report.md`` (``markdown``), the ``report.html`` of a batch
folder (``html``, plots from ``plots``) or of a run folder (``run``), sharing ``page``'s
furniture; ``outputs`` writes a finished run's files.

A batch's page needs no torch: the run's reports (which read the trajectory store) load on
first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .html import write_report

if TYPE_CHECKING:
    from .markdown import SLOWER, best_step, render_report
    from .outputs import write_outputs
    from .run import render_run

__all__ = ["SLOWER", "best_step", "render_report", "render_run", "write_outputs", "write_report"]
_RUN = {  # name: the module that has it
    "SLOWER": "markdown",
    "best_step": "markdown",
    "render_report": "markdown",
    "render_run": "run",
    "write_outputs": "outputs",
}


def __getattr__(name: str) -> Any:
    if name in _RUN:
        return getattr(importlib.import_module(f".{_RUN[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
