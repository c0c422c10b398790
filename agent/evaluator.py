"""The evaluation dependency of the graph: a small interface over ``kforge.tools.evaluate``.

The graph takes an :class:`Evaluator`; the default one calls the engine, tests can pass
their own (to count calls, or to test routing without evaluating anything).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..tools.evaluate import EvalOptions
from ..tools.result import Result
from ..tools.task import Task
from .settings import RunSettings

OnResult = Callable[[int, Result], None]
OnPhase = Callable[[int, str], None]  # candidate index, "compiling" / "verifying" / "timing"


class Evaluator(Protocol):
    def evaluate_many(
        self,
        task: Task,
        sources: list[str],
        options: EvalOptions,
        on_result: OnResult | None = None,
        on_phase: OnPhase | None = None,
    ) -> list[Result]: ...

    def measure_baseline(self, task: Task, options: EvalOptions) -> Result: ...


class EngineEvaluator:
    """The real engine: sandboxed workers, compile pool, verification and timing."""

    def evaluate_many(
        self,
        task: Task,
        sources: list[str],
        options: EvalOptions,
        on_result: OnResult | None = None,
        on_phase: OnPhase | None = None,
    ) -> list[Result]:
        from ..tools.evaluate import evaluate_many

        return evaluate_many(task, sources, options, on_result=on_result, on_phase=on_phase)

    def measure_baseline(self, task: Task, options: EvalOptions) -> Result:
        from ..tools.evaluate import measure_baseline

        return measure_baseline(task, options)


def eval_options(settings: RunSettings) -> EvalOptions:
    on_cpu = settings.device == "cpu"
    options = EvalOptions(
        device=settings.device,
        precision=settings.precision,
        timeout_s=settings.eval_timeout_s,
        compile_baseline=not on_cpu,
    )
    if settings.timing_trials is not None:
        options.timing_trials = settings.timing_trials
    elif on_cpu:
        options.timing_trials = 5
    if on_cpu:
        options.trials = min(options.trials, 2)
    return options
