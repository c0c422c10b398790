"""Conversions between the checkpointed state (plain JSON) and the policy's types."""

from __future__ import annotations

from ..tools.result import Result, Status
from .context import RunContext
from .policy.base import AttemptView, Context, Doc
from .state import AttemptState, State
from .store import AttemptRecord


def result_of(state: State, attempt_id: str) -> Result | None:
    data = state.get("results", {}).get(attempt_id)
    return Result.from_json(data) if data is not None else None


def attempt_views(state: State, round: int | None = None) -> list[AttemptView]:
    """The evaluated attempts (of one round, or all), in order."""
    views = []
    for attempt in state.get("attempts", []):
        result = result_of(state, attempt["attempt_id"])
        if result is None or (round is not None and attempt["round"] != round):
            continue
        source = attempt["source"] or attempt["error"]
        views.append(
            AttemptView(attempt["attempt_id"], attempt["round"], source, result, attempt["strategy"])
        )
    return views


def policy_context(state: State, rc: RunContext, round: int) -> Context:
    baseline = state.get("baseline")
    return Context(
        task=rc.task,
        hardware=rc.hardware,
        precision=rc.settings.precision,
        baseline=Result.from_json(baseline) if baseline else None,
        docs=[Doc(**doc) for doc in state.get("docs", [])],
        attempts=attempt_views(state),
        plan=state.get("plan", ""),
        analysis=state.get("analysis", ""),
        round=round,
        profile=state.get("profile", ""),
        base=state.get("base_attempt_id"),
    )


def attempt_state(record: AttemptRecord) -> AttemptState:
    return AttemptState(
        attempt_id=record.attempt_id,
        round=record.round,
        source=record.source,
        strategy=record.strategy,
        plan=record.plan,
        analysis=record.analysis,
        error=record.error,
    )


def unbuildable(state: State, attempt_id: str) -> str | None:
    """Why the next round cannot build on ``attempt_id`` (one line), or None when it can."""
    attempt = next((a for a in state.get("attempts", []) if a["attempt_id"] == attempt_id), None)
    if attempt is None:
        return f"no attempt {attempt_id!r} in this run: /attempts lists them"
    if attempt_id not in state.get("results", {}):
        return f"{attempt_id} was not evaluated yet: /run continues the round"
    if not attempt["source"]:
        return f"{attempt_id} has no code to build on (its answer could not be parsed)"
    return None


def speed_of(result: Result) -> float | None:
    """How a verified result ranks: its speedup over eager. None for a failed one."""
    if result.status is not Status.OK:
        return None
    return result.speedup_vs_eager
