"""The coder: asks the policy for this round's candidates and records them before evaluation.

Attempt ids are deterministic (``r{round}-c{index}``); candidates recorded before an
interruption are reused on resume instead of being asked for again. The attempt the user chose
to build on (``base_attempt_id``: ``/pick`` or the choice interrupt) serves this round only.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from ..context import RunContext
from ..events import ProposalsReady
from ..state import State
from ..store import AttemptRecord
from ..views import attempt_state, policy_context


def coder(state: State, runtime: Runtime[RunContext]) -> dict[str, Any]:
    rc = runtime.context
    round = state.get("round", 0) + 1
    records = rc.store.attempts(rc.run_id, round)
    reused = bool(records)
    if not reused:
        k = rc.settings.candidates
        proposals = rc.policy.propose(policy_context(state, rc, round), k)[:k]
        for index, proposal in enumerate(proposals):
            record = AttemptRecord(
                attempt_id=f"r{round}-c{index}",
                round=round,
                idx=index,
                source=proposal.source,
                strategy=proposal.strategy,
                plan=proposal.plan,
                analysis=proposal.analysis,
                raw=proposal.raw,
                error=proposal.error,
                policy=rc.policy.name,
                model=rc.model,
                parent=proposal.parent,
            )
            rc.store.add_attempt(rc.run_id, rc.task.hash, record)
            records.append(record)
    new = [attempt_state(record) for record in records]
    rc.emit(
        ProposalsReady(
            round=round,
            attempt_ids=[a["attempt_id"] for a in new],
            format_errors=sum(1 for a in new if not a["source"]),
            reused=reused,
        )
    )
    return {"round": round, "attempts": [*state.get("attempts", []), *new], "base_attempt_id": None}
