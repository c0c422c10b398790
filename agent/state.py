"""The graph's state. Everything in it is plain JSON (it is checkpointed to SQLite).

Attempts and results are kept as JSON dicts; :mod:`kforge.agent.views` turns them into
the policy's :class:`AttemptView` objects.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

DecisionName = Literal["continue", "replan", "stop"]
BASELINE_ID = "baseline"  # the attempt id under which a run stores the reference's measurement


class RunInput(TypedDict):
    """The narrow public input: which run this is. Everything else comes from the run context."""

    run_id: str


class AttemptState(TypedDict):
    attempt_id: str  # f"r{round}-c{index}", deterministic so a resumed run finds its results
    round: int
    source: str  # empty for an answer that could not be parsed
    strategy: str
    plan: str
    analysis: str
    error: str  # why the answer could not be parsed


class State(TypedDict, total=False):
    run_id: str
    round: int  # the round last proposed (0 before the first)
    plan: str
    plan_round: int  # the round after which the current plan was made (0: at the start)
    docs: list[dict[str, Any]]  # retrieved docs as Doc fields
    baseline: dict[str, Any] | None  # the reference measured against itself (Result JSON)
    attempts: list[AttemptState]  # every attempt so far, in order
    results: dict[str, dict[str, Any]]  # attempt id -> Result JSON
    profile: str  # the profiler's summary of the latest round
    analysis: str  # the critic's latest contrastive analysis
    best_attempt_id: str | None
    best_speedup: float | None
    base_attempt_id: str | None  # what the next round builds on, the user's pick (None: the policy's)
    rounds_without_improvement: int
    failed_rounds_in_row: int
    elapsed_s: float  # time spent in the loop, summed over resumed sessions
    clock_mark: float  # when elapsed_s was last brought up to date
    decision: DecisionName
    reason: str
