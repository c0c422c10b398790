"""Typed progress events and their sinks.

Nodes report progress by calling the run's event sink (a plain callable). The terminal
renders events with rich; the same events are appended to ``events.jsonl`` in the run
folder and will feed MCP and chat front ends.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

from rich.console import Console
from rich.markup import escape


@dataclasses.dataclass(kw_only=True)
class Event:
    kind: ClassVar[str] = "event"
    run_id: str = ""
    at: float = dataclasses.field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, **dataclasses.asdict(self)}


@dataclasses.dataclass(kw_only=True)
class RunStarted(Event):
    kind: ClassVar[str] = "run_started"
    task: str
    run_dir: str
    policy: str
    resumed: bool


@dataclasses.dataclass(kw_only=True)
class Notice(Event):
    """Something the user should know that does not stop the run (e.g. no retrieval)."""

    kind: ClassVar[str] = "notice"
    message: str


@dataclasses.dataclass(kw_only=True)
class PlanReady(Event):
    kind: ClassVar[str] = "plan_ready"
    round: int
    plan: str
    docs: list[str]  # ids of the retrieved docs


@dataclasses.dataclass(kw_only=True)
class ProposalsReady(Event):
    kind: ClassVar[str] = "proposals_ready"
    round: int
    attempt_ids: list[str]
    format_errors: int
    reused: bool  # proposals recorded before an interruption, not asked for again


@dataclasses.dataclass(kw_only=True)
class CandidateEvaluated(Event):
    kind: ClassVar[str] = "candidate_evaluated"
    attempt_id: str
    status: str
    speedup_vs_eager: float | None
    candidate_ms: float | None
    reused: bool  # the result was in the store already (resumed run); not evaluated again
    log: str = ""


@dataclasses.dataclass(kw_only=True)
class CandidatePhase(Event):
    """What the candidate being evaluated is doing: compiling, verifying or timing."""

    kind: ClassVar[str] = "candidate_phase"
    attempt_id: str
    phase: str


@dataclasses.dataclass(kw_only=True)
class RoundProfiled(Event):
    kind: ClassVar[str] = "round_profiled"
    round: int
    summary: str


@dataclasses.dataclass(kw_only=True)
class Decision(Event):
    kind: ClassVar[str] = "decision"
    round: int
    decision: str  # "continue", "replan" or "stop"
    reason: str
    best_attempt_id: str | None
    best_speedup: float | None


@dataclasses.dataclass(kw_only=True)
class RunFinished(Event):
    kind: ClassVar[str] = "run_finished"
    run_dir: str
    best_attempt_id: str | None
    best_speedup: float | None
    reason: str


@dataclasses.dataclass(kw_only=True)
class RunFailed(Event):
    """The run stopped on an error; it can be resumed with ``--resume``."""

    kind: ClassVar[str] = "run_failed"
    run_dir: str
    message: str


EventSink = Callable[[Event], None]


def fan_out(sinks: Iterable[EventSink | None]) -> EventSink:
    live = [s for s in sinks if s is not None]

    def emit(event: Event) -> None:
        for sink in live:
            sink(event)

    return emit


class JsonlSink:
    """Appends each event as one JSON line (the feed for other front ends and for tests)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, event: Event) -> None:
        with self.path.open("a") as fh:
            fh.write(json.dumps(event.to_json()) + "\n")


# Said wherever a run's best is below 1x: best.py is still the fastest verified candidate,
# but the user's own PyTorch is faster.
SLOWER_THAN_EAGER = "slower than eager: no candidate beat the reference; keep the original code"


def _speedup(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


class RichRenderer:
    """One line per event in the terminal. ``render`` gives rich markup in which every text
    that came from a task, a candidate, a worker or an LLM is escaped."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)

    def __call__(self, event: Event) -> None:
        self.console.print(self.render(event), highlight=False, soft_wrap=True)

    def render(self, event: Event) -> str:
        match event:
            case RunStarted():
                verb = "resuming" if event.resumed else "optimizing"
                return f"[bold]{verb}[/] {escape(event.task)} with {escape(event.policy)} -> {escape(event.run_dir)}"
            case Notice():
                return f"[yellow]note[/] {escape(event.message)}"
            case PlanReady():
                first = event.plan.strip().splitlines()[0] if event.plan.strip() else "(empty plan)"
                return f"[cyan]plan[/] {escape(first[:100])} ({len(event.docs)} docs)"
            case ProposalsReady():
                extra = f", {event.format_errors} unparsable" if event.format_errors else ""
                again = " (recorded before)" if event.reused else ""
                return f"[cyan]round {event.round}[/] {len(event.attempt_ids)} candidates{extra}{again}"
            case CandidateEvaluated():
                colour = "green" if event.status == "ok" else "red"
                ms = f"{event.candidate_ms:.4g} ms" if event.candidate_ms is not None else ""
                again = " (from store)" if event.reused else ""
                return (
                    f"  {escape(event.attempt_id)} [{colour}]{escape(event.status)}[/] "
                    f"{_speedup(event.speedup_vs_eager)} vs eager {ms}{again}"
                )
            case CandidatePhase():
                return f"[dim]  {escape(event.attempt_id)} {escape(event.phase)}[/]"
            case RoundProfiled():
                return f"[dim]{escape(event.summary.splitlines()[0]) if event.summary else ''}[/]"
            case Decision():
                return (
                    f"[magenta]{event.decision}[/] after round {event.round}: {escape(event.reason)} "
                    f"(best {escape(event.best_attempt_id or '-')} {_speedup(event.best_speedup)} vs eager"
                    f"{', slower than eager' if (event.best_speedup or 1) < 1 else ''})"
                )
            case RunFinished():
                return (
                    f"[bold green]done[/] {escape(event.reason)}; best {escape(event.best_attempt_id or '-')} "
                    f"{_speedup(event.best_speedup)}"
                    f"{f' [yellow]{SLOWER_THAN_EAGER}[/]' if (event.best_speedup or 1) < 1 else ''}"
                    f"; see {escape(event.run_dir)}"
                )
            case RunFailed():
                return f"[bold red]stopped[/] {escape(event.message)} (resume with --resume {escape(event.run_dir)})"
        return escape(event.kind)
