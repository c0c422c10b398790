"""The profiler: where the time goes in this round's candidates, from their measured Results.

Roofline fraction and bound for each verified candidate, Nsight Compute figures when they
were collected, and the failures by status.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from langgraph.runtime import Runtime

from ...tools.profile import describe_ncu
from ...tools.result import Result, Status
from ..context import RunContext
from ..events import RoundProfiled
from ..state import State
from ..views import attempt_views


def _line(attempt_id: str, result: Result) -> str:
    parts = [
        f"{attempt_id}: {result.candidate_ms:.4g} ms" if result.candidate_ms is not None else f"{attempt_id}:"
    ]
    if result.speedup_vs_eager is not None:
        parts.append(f"{result.speedup_vs_eager:.2f}x vs eager")
    if result.roofline is not None:
        fraction = result.roofline_fraction
        where = f"{fraction:.0%} of the roofline floor" if fraction is not None else "floor unknown"
        parts.append(f"{result.roofline.bound}-bound, {where}")
    if result.ncu:
        parts.append("ncu: " + describe_ncu(result.ncu))
    return "; ".join(parts)


def summarise(round: int, results: list[tuple[str, Result]]) -> str:
    verified = [(aid, r) for aid, r in results if r.status is Status.OK]
    verified.sort(key=lambda item: item[1].candidate_ms if item[1].candidate_ms is not None else float("inf"))
    failed = Counter(r.status.value for _, r in results if r.status is not Status.OK)
    head = f"round {round}: {len(verified)} of {len(results)} verified"
    if failed:
        head += " (" + ", ".join(f"{n} {status}" for status, n in sorted(failed.items())) + ")"
    labels = {r.timing_label for _, r in verified if r.timing_label}
    if labels:
        head += f"; timed by {', '.join(sorted(labels))}"
    return "\n".join([head, *(_line(aid, r) for aid, r in verified)])


def profiler(state: State, runtime: Runtime[RunContext]) -> dict[str, Any]:
    round = state["round"]
    views = attempt_views(state, round)
    summary = summarise(round, [(view.attempt_id, view.result) for view in views])
    runtime.context.emit(RoundProfiled(round=round, summary=summary))
    return {"profile": summary}
