"""The run a chat session drives: its task, run folder, store and settings.

Methods return data or raise :class:`ChatError` (one line, said to the user); ``slash``
renders. The LLM's tools call the same methods.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import StateSnapshot
from rich.console import Console

from ...tools.task import Task, TaskError, load_task, parse_candidate
from ..checkpoint import Graph, open_graph
from ..evaluator import EngineEvaluator, eval_options
from ..events import RichRenderer
from ..report import best_step
from ..run import RunSummary, new_run, optimize
from ..settings import RunSettings
from ..store import USER_POLICY, AttemptRecord, TrajectoryStep, TrajectoryStore
from ..views import attempt_state, unbuildable
from .approval import terminal_answers
from .log import ChatLog
from .stopper import StopListener

REFERENCE = "task"  # names the task's own Model where an attempt id is expected (/diff task r1-c0)
IN_ROUND = {"evaluate", "profiler", "critic"}  # next nodes while a round is midway


class ChatError(RuntimeError):
    """Bad input or a state the command cannot act on. The message is one line."""


@dataclasses.dataclass
class Session:
    settings: RunSettings
    console: Console
    log: ChatLog = dataclasses.field(default_factory=ChatLog)
    run_dir: Path | None = None
    run_id: str | None = None
    task: Task | None = None
    typed_ahead: list[str] = dataclasses.field(default_factory=list)  # lines typed while a round ran

    # The run

    def load(self, path: Path) -> Task:
        """Start a new run folder for the task file (checked first: a bad file changes nothing)."""
        try:
            load_task(path)
        except TaskError as err:
            raise ChatError(f"{err}; /task takes a KernelBench-format file") from None
        self.run_id, self.run_dir, self.task = new_run(path, self.settings)
        self.log.attach(self.run_dir / "chat.db")
        return self.task

    def reopen(self, run_dir: Path) -> None:
        """Continue the run in ``run_dir``: its task, its conversation, its graph."""
        meta = json.loads((run_dir / "run.json").read_text())
        self.run_id, self.run_dir = meta["run_id"], run_dir
        self.task = load_task(run_dir / meta["task"])
        self.log.attach(run_dir / "chat.db")

    def _need_run(self) -> tuple[str, Path, Task]:
        if self.run_id is None or self.run_dir is None or self.task is None:
            raise ChatError("no task loaded: /task FILE first")
        return self.run_id, self.run_dir, self.task

    @contextlib.contextmanager
    def _graph(self) -> Iterator[tuple[Graph, RunnableConfig]]:
        """The run's compiled graph over its checkpoints, and the run's config."""
        run_id, run_dir, _ = self._need_run()
        config: RunnableConfig = {"configurable": {"thread_id": run_id}}
        with open_graph(run_dir) as graph:
            yield graph, config

    def _snapshot(self) -> StateSnapshot | None:
        """Where the graph stands; None before the loop's first step."""
        _, run_dir, _ = self._need_run()
        if not (run_dir / "checkpoint.db").is_file():
            return None
        with self._graph() as (graph, config):
            snapshot: StateSnapshot = graph.get_state(config)
        return snapshot if snapshot.values else None

    def _update(self, values: dict[str, Any], as_node: str | None = None) -> None:
        """Change the checkpointed state, as LangGraph's ``update_state`` does (a new checkpoint)."""
        with self._graph() as (graph, config):
            graph.update_state(config, values, as_node=as_node)

    def run(self, rounds: int | None = None) -> RunSummary:
        """Run ROUNDS more rounds (default: the settings'; a round stopped midway counts as one),
        with plan approval and, when asked for, the choice of what each round builds on. A
        finished run goes on with the next round. ``/stop`` or Ctrl-C stops it where it is."""
        _, run_dir, _ = self._need_run()
        snapshot = self._snapshot()
        done = 0
        if snapshot is not None:
            done = snapshot.values.get("round", 0) - (1 if set(snapshot.next) & IN_ROUND else 0)
            if not snapshot.next:  # finished (a budget or the target): the user asks for more
                self._update({"decision": "continue"}, as_node="choose")
        settings = self.settings.replace(approve=True, rounds=done + (rounds or self.settings.rounds))
        answer = terminal_answers(self.console)
        listener = StopListener(self.console)

        def on_interrupt(payload: dict[str, Any]) -> Any:
            with listener.paused():
                return answer(payload)

        try:
            with listener:
                return optimize(
                    None,
                    settings,
                    on_event=RichRenderer(self.console),
                    resume=run_dir,
                    on_interrupt=on_interrupt,
                )
        finally:
            self.typed_ahead += listener.typed

    def pick(self, attempt_id: str) -> None:
        """Build the next round on ``attempt_id`` (the field the choice interrupt sets)."""
        snapshot = self._snapshot()
        if snapshot is None:
            raise ChatError("nothing to build on yet: /run a round first")
        problem = unbuildable(snapshot.values, attempt_id)  # type: ignore[arg-type]
        if problem is not None:
            raise ChatError(problem)
        self._update({"base_attempt_id": attempt_id})

    # What the run holds

    @property
    def store(self) -> TrajectoryStore:
        _, run_dir, _ = self._need_run()
        return TrajectoryStore(run_dir / "trajectories.db")

    def steps(self) -> list[TrajectoryStep]:
        run_id, _, _ = self._need_run()
        trajectories = self.store.trajectories(run_id)
        return trajectories[0].steps if trajectories else []

    def step(self, attempt_id: str) -> TrajectoryStep:
        for step in self.steps():
            if step.attempt.attempt_id == attempt_id:
                return step
        raise ChatError(f"no attempt {attempt_id!r} in this run: /attempts lists them")

    def source(self, attempt_id: str) -> str:
        if attempt_id == REFERENCE:
            return self._need_run()[2].source
        return self.step(attempt_id).attempt.source

    def best(self) -> TrajectoryStep:
        best = best_step(self.steps())
        if best is None:
            raise ChatError("no verified candidate yet: /run first")
        return best

    def plan(self) -> str:
        run_id, _, _ = self._need_run()
        plans = {r: kinds["plan"] for r, kinds in self.store.analyses(run_id).items() if "plan" in kinds}
        if not plans:
            raise ChatError("no plan yet: /run makes one and asks you to approve it")
        return plans[max(plans)]

    def search(self, query: str) -> list[Any]:
        """The retrieval store's nearest hits (docs, hardware sheets, prior kernels)."""
        try:
            from ...retrieval import Embedder, RetrievalError
            from ...retrieval import Store as DocStore
        except ModuleNotFoundError as err:
            raise ChatError(f"search needs {err.name}: pip install kforge with its dependencies") from None
        try:
            docs = DocStore(None, Embedder(None))
            if docs.count() == 0:
                raise ChatError("the retrieval store is empty: run kforge index once")
            return docs.search(query, k=5)
        except RetrievalError as err:
            raise ChatError(str(err)) from None

    def evaluate_file(self, path: Path) -> TrajectoryStep:
        """Judge the user's own candidate against the task and record it as an attempt of the
        run (``u1``, ``u2``, ... strategy "user"), in the store and the graph's state."""
        run_id, _, task = self._need_run()
        if not path.is_file():
            raise ChatError(f"{path}: no such file")
        source = path.read_text()
        try:
            parse_candidate(source)
        except TaskError as err:
            raise ChatError(f"{path}: {err}; /eval takes a file defining class ModelNew") from None
        (result,) = EngineEvaluator().evaluate_many(task, [source], eval_options(self.settings))
        snapshot = self._snapshot()
        state = snapshot.values if snapshot is not None else {}
        round = state.get("round", 0)
        store = self.store
        attempts = store.attempts(run_id)
        users = [a for a in attempts if a.policy == USER_POLICY]
        record = AttemptRecord(
            attempt_id=f"u{len(users) + 1}", round=round, idx=sum(a.round == round for a in attempts),
            source=source, strategy=USER_POLICY, plan=f"/eval {path}", policy=USER_POLICY,
        )  # fmt: skip
        store.add_attempt(run_id, task.hash, record)
        store.add_result(run_id, record.attempt_id, result)
        if snapshot is not None:  # else the planner's first visit takes it from the store
            self._update(
                {
                    "attempts": [*state.get("attempts", []), attempt_state(record)],
                    "results": {**state.get("results", {}), record.attempt_id: result.to_json()},
                }
            )
        return TrajectoryStep(record, result)
