"""The reward of a candidate, from what the evaluation engine measured, and the GRPO reward
function that evaluates generated answers with it (sandboxed workers, cheat checks, timing).

Verified: ``1 + log2(speedup vs eager)``, at least ``VERIFIED_MIN`` (a slow verified candidate
still beats a wrong one). Incorrect, failing to build or run, or not parseable: ``FLOOR``.
Rejected (a detected cheat): ``REJECTED``, below the floor.
"""

from __future__ import annotations

import dataclasses
import math
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ...tools.evaluate import EvalOptions
from ...tools.result import Result, Status
from ...tools.task import Task, load_task, source_hash
from ..policy.parse import to_proposal

FLOOR = 0.0
VERIFIED_MIN = 0.1
REJECTED = -1.0


def reward_of(result: Result) -> float:
    if result.status is Status.REJECTED:
        return REJECTED
    if result.status is not Status.OK:
        return FLOOR
    speedup = result.speedup_vs_eager
    if speedup is None or speedup <= 0:
        return VERIFIED_MIN
    return max(VERIFIED_MIN, 1.0 + math.log2(speedup))


def completion_text(completion: Any) -> str:
    """A TRL completion: plain text, or a conversation whose last message is the answer."""
    if isinstance(completion, str):
        return completion
    return str(completion[-1]["content"]) if completion else ""


@dataclasses.dataclass
class EvalReward:
    """GRPO reward function: ``(prompts, completions, task_name, task_source) -> rewards``.

    Answers are grouped by task; each task's parseable candidates go to ``evaluate_many`` in
    one call, tasks in parallel (``parallel`` at once). ``results`` keeps the last batch's
    results for logging (None where an answer did not parse)."""

    options: EvalOptions
    parallel: int = 1
    __name__: str = "kforge_eval_reward"
    results: list[Result | None] = dataclasses.field(default_factory=list)
    evaluations: int = 0  # candidates evaluated so far
    seconds: float = 0.0  # wall time spent evaluating so far
    statuses: dict[str, int] = dataclasses.field(default_factory=dict)  # answers so far, by status

    def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        task_name: list[str],
        task_source: list[str],
        **_: Any,
    ) -> list[float]:
        sources = [to_proposal(completion_text(c)).source for c in completions]
        by_task: dict[str, list[int]] = {}
        for i, source in enumerate(sources):
            if source:
                by_task.setdefault(task_source[i], []).append(i)
        results: list[Result | None] = [None] * len(sources)
        started = time.monotonic()

        def run(task_src: str) -> None:
            indices = by_task[task_src]
            task = self._task(task_name[indices[0]], task_src)
            for i, result in zip(indices, self._evaluate(task, [sources[i] for i in indices]), strict=True):
                results[i] = result

        with ThreadPoolExecutor(max_workers=max(1, self.parallel)) as pool:
            list(pool.map(run, by_task))
        self.results = results
        self.evaluations += sum(len(v) for v in by_task.values())
        self.seconds += time.monotonic() - started
        for result in results:
            status = result.status.value if result else "unparsed"
            self.statuses[status] = self.statuses.get(status, 0) + 1
        return [FLOOR if r is None else reward_of(r) for r in results]

    def _evaluate(self, task: Task, sources: list[str]) -> list[Result]:
        from ...tools.evaluate import evaluate_many

        return evaluate_many(task, sources, self.options)

    def _task(self, name: str, source: str) -> Task:
        """The task as a file under the cache folder (workers import it from there)."""
        folder = Path(self.options.cache_dir) / "train-tasks"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{Path(name).name}-{source_hash(source)[:12]}.py"
        if not path.is_file():
            path.write_text(source)
        return load_task(path, check_import=False)
