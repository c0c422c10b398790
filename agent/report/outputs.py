"""What a finished run leaves in its folder: ``report.md`` (``markdown``), ``report.html``
(``html``) and ``best.py`` (the fastest verified candidate)."""

from __future__ import annotations

from pathlib import Path

from ..store import TrajectoryStore
from .html import write_report
from .markdown import batch_choice, best_step, render_report


def write_outputs(store: TrajectoryStore, run_id: str, run_dir: Path) -> Path | None:
    """Write report.md, report.html and best.py; returns best.py's path, or None when nothing verified."""
    (run_dir / "report.md").write_text(render_report(store, run_id))
    write_report(run_dir)
    best_path = run_dir / "best.py"
    chosen = batch_choice(store, run_id)
    for trajectory in store.trajectories(run_id):
        best = best_step(trajectory.steps, chosen)
        if best is not None:
            best_path.write_text(best.attempt.source)
            return best_path
    return None
