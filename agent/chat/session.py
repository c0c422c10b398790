"""The run a chat session drives: its task, run folder, store and settings.

Methods return data or raise :class:`ChatError` (one line, said to the user); ``commands``
renders. The LLM's tools call the same methods.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from rich.console import Console

from ...tools.result import Result
from ...tools.task import Task, TaskError, load_task
from ..evaluator import EngineEvaluator, eval_options
from ..events import RichRenderer
from ..graph import build_graph
from ..report import best_step
from ..run import RunSummary, new_run, optimize
from ..settings import RunSettings
from ..store import Store, TrajectoryStep
from .approval import plan_approver
from .log import ChatLog

REFERENCE = "task"  # names the task's own Model where an attempt id is expected (/diff task r1-c0)


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

    def next_nodes(self) -> tuple[str, ...]:
        """Where the graph stands: the nodes it runs next (() when finished or not started)."""
        run_id, run_dir, _ = self._need_run()
        if not (run_dir / "checkpoint.db").is_file():
            return ("planner",)  # not started
        config: RunnableConfig = {"configurable": {"thread_id": run_id}}
        conn = sqlite3.connect(run_dir / "checkpoint.db", check_same_thread=False)
        try:
            snapshot = build_graph().compile(checkpointer=SqliteSaver(conn)).get_state(config)
        finally:
            conn.close()
        if not snapshot.values:
            return ("planner",)
        return tuple(snapshot.next)

    def run(self, rounds: int | None = None) -> RunSummary:
        """Run (or continue) the loop with plan approval; Ctrl-C stops it where it is."""
        _, run_dir, _ = self._need_run()
        if not self.next_nodes():
            raise ChatError("this run is finished: /report shows it, /task FILE starts a new one")
        settings = self.settings.replace(approve=True, **({"rounds": rounds} if rounds else {}))
        return optimize(
            None,
            settings,
            on_event=RichRenderer(self.console),
            resume=run_dir,
            on_interrupt=plan_approver(self.console),
        )

    # What the run holds

    @property
    def store(self) -> Store:
        _, run_dir, _ = self._need_run()
        return Store(run_dir / "trajectories.db")

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

    def evaluate_file(self, path: Path) -> Result:
        """Judge the user's own candidate against the task (not recorded as an attempt)."""
        task = self._need_run()[2]
        if not path.is_file():
            raise ChatError(f"{path}: no such file")
        (result,) = EngineEvaluator().evaluate_many(task, [path.read_text()], eval_options(self.settings))
        return result
