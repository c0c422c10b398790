"""The planner: measures the baseline and retrieves docs once, then asks the policy for a plan.

A plan is stored per round it was made after (0: the first), so a resumed run reuses it.
Candidates the user judged before the loop started (chat's ``/eval``) join the attempts.
With ``settings.approve`` the node stops on a LangGraph ``interrupt`` until the user answers
with the plan to follow (as shown, or edited): ``Command(resume=plan_text)``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import interrupt

from ...tools.result import Status
from ..context import RunContext
from ..evaluator import eval_options
from ..events import Notice, PlanReady
from ..retrieve import RetrievalMissing, retrieve_docs
from ..state import BASELINE_ID, State
from ..store import USER_POLICY
from ..views import attempt_state, policy_context


def _baseline(rc: RunContext) -> dict[str, Any]:
    stored = rc.store.results(rc.run_id).get(BASELINE_ID)
    if stored is None:
        stored = rc.evaluator.measure_baseline(rc.task, eval_options(rc.settings))
        rc.store.add_result(rc.run_id, BASELINE_ID, stored)
    if stored.status is not Status.OK:
        rc.emit(
            Notice(
                message=f"the reference itself did not run cleanly ({stored.status.value}): {stored.log[:200]}"
            )
        )
    return stored.to_json()


def _docs(rc: RunContext) -> list[dict[str, Any]]:
    # A policy that reads no documents (the embedded one) gets none: loading the embedding
    # model and the store costs some 9 s of CPU a run for nothing it would use.
    if not rc.settings.retrieval or not getattr(rc.policy, "reads_docs", True):
        return []
    try:
        docs = retrieve_docs(rc.task, rc.hardware, rc.settings.retrieval_budget_chars)
    except RetrievalMissing as err:
        rc.emit(Notice(message=str(err)))
        return []
    return [dataclasses.asdict(doc) for doc in docs]


def planner(state: State, runtime: Runtime[RunContext]) -> dict[str, Any]:
    rc = runtime.context
    updates: dict[str, Any] = {}
    if "round" not in state:  # the first visit: set up the loop's bookkeeping
        user = [r for r in rc.store.attempts(rc.run_id) if r.policy == USER_POLICY]
        stored = rc.store.results(rc.run_id)
        updates.update(
            round=0,
            attempts=[attempt_state(r) for r in user],
            results={r.attempt_id: stored[r.attempt_id].to_json() for r in user if r.attempt_id in stored},
            rounds_without_improvement=0,
            failed_rounds_in_row=0,
            best_attempt_id=None,
            best_speedup=None,
            elapsed_s=0.0,
            clock_mark=time.time(),
        )
    if state.get("baseline") is None:
        updates["baseline"] = _baseline(rc)
    if "docs" not in state:
        updates["docs"] = _docs(rc)
    after_round = state.get("round", 0)
    plan = rc.store.analysis(rc.run_id, after_round, "plan")
    if plan is None:
        plan = rc.policy.plan(policy_context({**state, **updates}, rc, after_round))  # type: ignore[typeddict-item]
        rc.store.add_analysis(rc.run_id, after_round, "plan", plan)
    if rc.settings.approve:
        approved = str(interrupt({"kind": "plan", "round": after_round, "plan": plan}))
        if approved != plan:
            plan = approved
            rc.store.add_analysis(rc.run_id, after_round, "plan", plan)
    docs = updates.get("docs", state.get("docs", []))
    rc.emit(PlanReady(round=after_round, plan=plan, docs=[doc["id"] for doc in docs]))
    return {**updates, "plan": plan, "plan_round": after_round, "failed_rounds_in_row": 0}
