"""The critic: asks the policy for the contrastive analysis of this round, then decides by
rules (not by the model): stop, replan or continue."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from langgraph.runtime import Runtime

from ...tools.result import Result, Status
from ..context import RunContext
from ..events import Decision
from ..settings import RunSettings
from ..state import DecisionName, State
from ..views import attempt_views, policy_context, result_of, speed_of


@dataclasses.dataclass(frozen=True)
class Progress:
    round: int
    elapsed_s: float
    best_speedup: float | None  # over every round so far
    rounds_without_improvement: int
    failed_rounds_in_row: int  # rounds since the last plan in which every candidate failed
    proposed: int = 1  # candidates the policy proposed this round (0: it has nothing left to try)


def decide(progress: Progress, settings: RunSettings) -> tuple[DecisionName, str]:
    target = settings.target_speedup
    if target is not None and progress.best_speedup is not None and progress.best_speedup >= target:
        return "stop", f"target speedup {target:g}x reached"
    if progress.proposed == 0:
        return "stop", (
            "the policy has nothing more to try: every strategy that applies was tried (the embedded"
            " policy varies only its own strategies, not a candidate you wrote; an LLM policy can)"
        )
    if progress.round >= settings.rounds:
        return "stop", f"all {settings.rounds} rounds done"
    if progress.elapsed_s >= settings.wall_time_s:
        return "stop", f"wall time budget of {settings.wall_time_s:g} s spent"
    if progress.rounds_without_improvement >= settings.patience:
        return "stop", f"no improvement in {progress.rounds_without_improvement} rounds"
    if progress.failed_rounds_in_row >= settings.replan_after_failed_rounds:
        return "replan", f"every candidate failed in {progress.failed_rounds_in_row} rounds in a row"
    return "continue", "improving" if progress.rounds_without_improvement == 0 else "within patience"


def best_of(state: State) -> tuple[str | None, float | None]:
    best: tuple[str | None, float | None] = (None, None)
    for attempt in state.get("attempts", []):
        result = result_of(state, attempt["attempt_id"])
        speed = speed_of(result) if result is not None else None
        if speed is not None and (best[1] is None or speed > best[1]):
            best = (attempt["attempt_id"], speed)
    return best


def _all_failed(results: list[Result]) -> bool:
    return all(r.status is not Status.OK for r in results)


def critic(state: State, runtime: Runtime[RunContext]) -> dict[str, Any]:
    rc = runtime.context
    round = state["round"]
    new = attempt_views(state, round)
    analysis = rc.store.analysis(rc.run_id, round, "critic")
    if analysis is None:
        analysis = rc.policy.analyse(policy_context(state, rc, round), new)
        rc.store.add_analysis(rc.run_id, round, "critic", analysis)

    old_best = state.get("best_speedup")
    best_id, best_speedup = best_of(state)
    improved = best_speedup is not None and (
        old_best is None or best_speedup > old_best * (1 + rc.settings.min_improvement)
    )
    now = time.time()
    elapsed = state.get("elapsed_s", 0.0) + now - max(state.get("clock_mark", now), rc.session_started_at)
    progress = Progress(
        round=round,
        elapsed_s=elapsed,
        best_speedup=best_speedup,
        rounds_without_improvement=0 if improved else state.get("rounds_without_improvement", 0) + 1,
        failed_rounds_in_row=state.get("failed_rounds_in_row", 0) + 1
        if _all_failed([v.result for v in new])
        else 0,
        proposed=len(new),
    )
    decision, reason = decide(progress, rc.settings)
    rc.emit(
        Decision(
            round=round, decision=decision, reason=reason, best_attempt_id=best_id, best_speedup=best_speedup
        )
    )
    return {
        "analysis": analysis,
        "best_attempt_id": best_id,
        "best_speedup": best_speedup,
        "rounds_without_improvement": progress.rounds_without_improvement,
        "failed_rounds_in_row": progress.failed_rounds_in_row,
        "elapsed_s": elapsed,
        "clock_mark": now,
        "decision": decision,
        "reason": reason,
    }
