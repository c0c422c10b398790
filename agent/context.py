"""The run context handed to every node: what the run depends on but never checkpoints."""

from __future__ import annotations

import dataclasses
import time

from ..tools.hardware import GpuSpec
from ..tools.task import Task
from .evaluator import Evaluator
from .events import Event, EventSink
from .policy.base import Policy
from .settings import RunSettings
from .store import TrajectoryStore


@dataclasses.dataclass
class RunContext:
    run_id: str
    task: Task
    settings: RunSettings
    policy: Policy
    evaluator: Evaluator
    store: TrajectoryStore
    hardware: GpuSpec | None
    on_event: EventSink
    model: str | None = None
    session_started_at: float = dataclasses.field(default_factory=time.time)

    def emit(self, event: Event) -> None:
        event.run_id = self.run_id
        self.on_event(event)
