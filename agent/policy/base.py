"""The one small interface every policy implements (an LLM, or the embedded strategies).

A policy plays three roles in the graph: the planner (``plan``), the coder
(``propose``) and the critic's analysis (``analyse``). Stop/continue decisions are
made by the critic node from budgets and measurements, not by the policy.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from ...tools.hardware import GpuSpec
from ...tools.result import Result
from ...tools.task import Task


@dataclasses.dataclass
class Doc:
    """A retrieved document, cited in prompts by its id."""

    id: str
    kind: str  # "hardware", "guide" or "kernel"
    text: str
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class AttemptView:
    """A previous attempt as the policy sees it: the code and what measuring it gave."""

    attempt_id: str
    round: int
    source: str
    result: Result
    strategy: str = ""  # what produced it (strategy name, or "llm")


@dataclasses.dataclass
class Context:
    """Everything a policy may read when planning, coding or analysing."""

    task: Task
    hardware: GpuSpec | None
    precision: str
    baseline: Result | None  # the reference measured against itself (eager / compile times, roofline)
    docs: list[Doc]
    attempts: list[AttemptView]  # all attempts so far, in order
    plan: str = ""
    analysis: str = ""  # the critic's latest analysis
    round: int = 0
    profile: str = ""  # the profiler's summary of where time went in the latest round
    base: str | None = None  # the attempt this round builds on, the user's pick (None: the policy's)


@dataclasses.dataclass
class Proposal:
    """One candidate. ``source`` is empty when the answer could not be parsed (format_error)."""

    source: str
    strategy: str
    analysis: str = ""
    plan: str = ""
    raw: str = ""  # the unparsed answer, kept for the trajectory
    error: str = ""  # why it could not be parsed, shown to the model next round
    parent: str = ""  # the attempt it builds on ("": the task's own module)


class Policy(Protocol):
    name: str
    reads_docs: bool  # whether plan/propose read ctx.docs (the planner retrieves only for a policy that does)

    def plan(self, ctx: Context) -> str:
        """The planner: a short plan for this task (what to try, in what order, why)."""
        ...

    def propose(self, ctx: Context, k: int) -> list[Proposal]:
        """The coder: up to ``k`` candidates for this round."""
        ...

    def analyse(self, ctx: Context, new: list[AttemptView]) -> str:
        """The critic's contrastive analysis of the measured variants, side by side."""
        ...
