"""The choice between rounds: with ``settings.choose`` the graph stops on a LangGraph ``interrupt``
that shows the attempts ranked, and the answer (``Command(resume=attempt_id)``, or "" to keep the
current choice) is the attempt the next round builds on: ``base_attempt_id``, the same
field chat's ``/pick`` sets. Without the setting the node changes nothing.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import interrupt

from ...tools.result import Status
from ..context import RunContext
from ..state import State
from ..views import attempt_views, unbuildable


def ranked(state: State) -> list[dict[str, Any]]:
    """The attempts a round can build on: verified ones fastest first, then the failed ones."""
    rows = [
        {"attempt_id": v.attempt_id, "strategy": v.strategy, "status": v.result.status.value,
         "speedup_vs_eager": v.result.speedup_vs_eager, "candidate_ms": v.result.candidate_ms}
        for v in attempt_views(state)
        if unbuildable(state, v.attempt_id) is None
    ]  # fmt: skip
    return sorted(rows, key=lambda r: (r["status"] != Status.OK.value, -(r["speedup_vs_eager"] or 0.0)))


def choose(state: State, runtime: Runtime[RunContext]) -> dict[str, Any]:
    if not runtime.context.settings.choose:
        return {}
    payload = {
        "kind": "choice",
        "round": state["round"],
        "candidates": ranked(state),
        "best": state.get("best_attempt_id"),
        "picked": state.get("base_attempt_id"),
    }
    chosen = interrupt(payload)
    if not chosen:  # "" (LangGraph takes Command(resume=None) for no answer at all)
        return {}
    problem = unbuildable(state, str(chosen))
    if problem is not None:
        raise ValueError(f"cannot build the next round on it: {problem}")
    return {"base_attempt_id": str(chosen)}
