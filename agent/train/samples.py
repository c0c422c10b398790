"""Recorded attempts with the prompt that produced them, read from trajectory stores.

The prompt is the one kforge sent (the recorded coder call of an LLM run) or, for a run of
the embedded policy, the one it would send: the coder prompt rendered from the same context
(the task, the plan, the earlier attempts with their results and the latest critic analysis).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from ...tools.result import Result, Status
from ...tools.task import Task, source_hash
from ..policy.base import AttemptView, Context
from ..policy.llm import SYSTEM
from ..policy.parse import to_proposal
from ..policy.ranker_data import find_stores, run_ids
from ..policy.render import coder_prompt
from ..store import BATCH_POLICY, Trajectory, TrajectoryStep, TrajectoryStore

Messages = list[dict[str, str]]


@dataclasses.dataclass
class Sample:
    """One evaluated attempt: the prompt it answered and the answer, with its result."""

    task_name: str
    task_source: str
    run_id: str
    attempt_id: str
    round: int
    prompt: Messages  # system and user messages
    answer: str  # the answer in the coder's three sections
    result: Result
    earlier: list[AttemptView]  # the attempts measured before its round (what the prompt shows)
    source_hash: str = ""  # of the candidate's source: the same code in another run has the same one
    confirmation: Status | None = None  # the batch's re-measurement of a best (None: not re-measured)


def answer_text(step: TrajectoryStep) -> str:
    """The recorded answer when it parses, else the three sections rebuilt from the attempt."""
    attempt = step.attempt
    if attempt.raw and to_proposal(attempt.raw).source:
        return attempt.raw
    if not attempt.source:
        return attempt.raw
    return (
        f"## Performance analysis\n{attempt.analysis.strip() or '(none)'}\n\n"
        f"## Plan\n{attempt.plan.strip() or '(none)'}\n\n"
        f"## Code\n```python\n{attempt.source.rstrip()}\n```\n"
    )


def _views(steps: list[TrajectoryStep]) -> list[AttemptView]:
    return [
        AttemptView(s.attempt.attempt_id, s.attempt.round, s.attempt.source, s.result, s.attempt.strategy)
        for s in steps
        if s.result is not None
    ]


def _rendered_prompt(
    trajectory: Trajectory, task: Task, settings: dict[str, object], step: TrajectoryStep, k: int
) -> Messages:
    round_ = step.attempt.round
    ctx = Context(
        task=task,
        hardware=None,
        precision=str(settings.get("precision", "fp32")),
        baseline=None,
        docs=[],
        attempts=_views([s for s in trajectory.steps if s.attempt.round < round_]),
        plan=trajectory.analyses.get(0, {}).get("plan", ""),
        analysis=trajectory.analyses.get(round_ - 1, {}).get("critic", ""),
        round=round_,
    )
    prompt = coder_prompt(ctx, str(settings.get("device", "cuda")), step.attempt.idx, k)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]


def _recorded_prompts(store: TrajectoryStore, run_id: str) -> dict[tuple[int, int], Messages]:
    """(round, index in round) -> messages of the run's coder calls, in the order they were made."""
    prompts: dict[tuple[int, int], Messages] = {}
    for call in store.llm_calls(run_id):
        if call["role"] == "coder" and not call["error"]:
            index = sum(1 for r, _ in prompts if r == call["round"])
            prompts[(call["round"], index)] = json.loads(call["request_json"])
    return prompts


def run_samples(store: TrajectoryStore, run_id: str) -> Iterator[Sample]:
    info = store.run_info(run_id)
    settings = json.loads(info["settings_json"]) if info else {}
    recorded = _recorded_prompts(store, run_id)
    confirmed = store.finalists(run_id) | store.confirmations(run_id)  # a failed re-measure: no target
    for trajectory in store.trajectories(run_id):
        task = store.task(trajectory.task_hash)
        steps = [s for s in trajectory.steps if s.attempt.policy != BATCH_POLICY]  # proposals only
        per_round: dict[int, int] = {}
        for step in steps:
            per_round[step.attempt.round] = per_round.get(step.attempt.round, 0) + 1
        for step in steps:
            if step.result is None:
                continue
            key = (step.attempt.round, step.attempt.idx)
            prompt = recorded.get(key) or _rendered_prompt(
                trajectory, task, settings, step, per_round[step.attempt.round]
            )
            check = confirmed.get(step.attempt.attempt_id)
            yield Sample(
                task_name=task.name,
                task_source=task.source,
                run_id=run_id,
                attempt_id=step.attempt.attempt_id,
                round=step.attempt.round,
                prompt=prompt,
                answer=answer_text(step),
                result=step.result,
                earlier=_views([s for s in steps if s.attempt.round < step.attempt.round]),
                source_hash=source_hash(step.attempt.source),
                confirmation=check.status if check is not None else None,
            )


def load_samples(paths: Iterable[Path]) -> list[Sample]:
    """Every evaluated attempt in the run or batch folders (or trajectories.db files) given."""
    samples: list[Sample] = []
    for db in find_stores(paths):
        store = TrajectoryStore(db)
        for run_id in run_ids(db):
            samples += run_samples(store, run_id)
        store.close()
    return samples
