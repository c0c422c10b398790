"""Evaluate this round's candidates: compile, verify and time them through ``tools/``.

Only attempts without a result are evaluated. Each result is written to the store as it
finishes, so a run killed mid-round loses at most the candidate in flight; on resume the
stored results are reused. An unparsable answer gets a ``format_error`` result unevaluated.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from ...tools.evaluate import EvalError, EvalOptions, check_runnable
from ...tools.result import Result, Status
from ...tools.task import TaskError, parse_candidate
from ..context import RunContext
from ..evaluator import eval_options
from ..events import CandidateEvaluated, CandidatePhase
from ..state import AttemptState, State


def _report(rc: RunContext, attempt_id: str, result: Result, *, reused: bool) -> None:
    rc.emit(
        CandidateEvaluated(
            attempt_id=attempt_id,
            status=result.status.value,
            speedup_vs_eager=result.speedup_vs_eager,
            candidate_ms=result.candidate_ms,
            reused=reused,
            log="" if result.status is Status.OK else result.log[:300],
        )
    )


def _format_error(attempt: AttemptState, options: EvalOptions) -> Result:
    return Result(
        status=Status.FORMAT_ERROR, device=options.device, precision=options.precision, log=attempt["error"]
    )


def _unrunnable(source: str, options: EvalOptions) -> Result | None:
    """A compile_error Result for a candidate that cannot run on this device (CUDA on the CPU)."""
    try:
        check_runnable(parse_candidate(source), options)
    except TaskError:
        return None  # the engine reports it as a format error
    except EvalError as err:
        return Result(
            status=Status.COMPILE_ERROR, device=options.device, precision=options.precision, log=str(err)
        )
    return None


def evaluate(state: State, runtime: Runtime[RunContext]) -> dict[str, Any]:
    rc = runtime.context
    round = state["round"]
    results = dict(state.get("results", {}))
    stored = rc.store.results(rc.run_id)
    options = eval_options(rc.settings)
    pending: list[AttemptState] = []
    for attempt in (a for a in state.get("attempts", []) if a["round"] == round):
        attempt_id = attempt["attempt_id"]
        if attempt_id in results:
            continue
        if attempt_id in stored:
            results[attempt_id] = stored[attempt_id].to_json()
            _report(rc, attempt_id, stored[attempt_id], reused=True)
            continue
        source = attempt["source"]
        early = _unrunnable(source, options) if source else _format_error(attempt, options)
        if early is None:
            pending.append(attempt)
            continue
        rc.store.add_result(rc.run_id, attempt_id, early)
        results[attempt_id] = early.to_json()
        _report(rc, attempt_id, early, reused=False)
    if not pending:
        return {"results": results}

    reported: set[int] = set()

    def on_result(index: int, result: Result) -> None:
        attempt_id = pending[index]["attempt_id"]
        rc.store.add_result(rc.run_id, attempt_id, result)
        reported.add(index)
        _report(rc, attempt_id, result, reused=False)

    def on_phase(index: int, phase: str) -> None:
        rc.emit(CandidatePhase(attempt_id=pending[index]["attempt_id"], phase=phase))

    sources = [attempt["source"] for attempt in pending]
    finished = rc.evaluator.evaluate_many(rc.task, sources, options, on_result, on_phase)
    for index, (attempt, result) in enumerate(zip(pending, finished, strict=True)):
        if index not in reported:
            on_result(index, result)
        results[attempt["attempt_id"]] = result.to_json()
    return {"results": results}
