"""Run the optimization loop on one task: ``optimize`` is what the CLI, batch, MCP and chat call.

A run folder holds ``run.json``, the task as it was given, ``trajectories.db`` (the store),
``checkpoint.db`` (langgraph's SQLite checkpointer, thread id = run id), ``events.jsonl``,
``report.md`` and ``best.py``. A run stopped at any point continues with ``resume``.

With ``settings.approve`` the graph stops on LangGraph interrupts for plan approval, with
``settings.choose`` for the choice of the attempt the next round builds on; ``optimize`` hands
each one to ``on_interrupt`` and resumes the graph with its answer (``Command(resume=...)``).
A run stopped with Ctrl-C is marked ``stopped``: what was evaluated is in the store, and
``resume`` reuses it.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from ..tools.hardware import detect_gpu
from ..tools.output import output_folder
from ..tools.result import Result
from ..tools.task import Task, TaskError, load_task
from .checkpoint import open_graph
from .context import RunContext
from .evaluator import EngineEvaluator, Evaluator
from .events import EventSink, JsonlSink, Notice, RunFailed, RunFinished, RunStarted, fan_out
from .policy.base import Policy
from .policy.choose import SetupError, check_policy, choose_policy  # callers import SetupError from here
from .policy.llm import LLMError
from .report import write_outputs
from .retrieve import RetrievalMissing, remember_winner
from .settings import RunSettings
from .store import TrajectoryStore


class RunStopped(Exception):
    """Raised by an interrupt handler (or Ctrl-C as KeyboardInterrupt) to stop the run where it is."""


STOPPED = "by the user; nothing evaluated is lost"  # the renderer says "stopped" first


@dataclasses.dataclass
class RunSummary:
    run_id: str
    run_dir: Path
    status: str  # "finished", "failed" or "paused" (at an interrupt nobody answered); both resume
    reason: str  # why the loop stopped, or the one-line error
    best_attempt_id: str | None
    best_speedup: float | None
    best_path: Path | None


def find_run(resume: str | Path, out: Path) -> Path:
    """A run folder given as a path or as a run id under ``out``."""
    for candidate in (Path(resume), out / str(resume)):
        if (candidate / "run.json").is_file():
            return candidate.resolve()
    raise SetupError(f"no run folder {resume} (looked in . and {out})")


# Answers a graph interrupt's payload (e.g. {"kind": "plan", "round": 0, "plan": "..."}).
InterruptHandler = Callable[[dict[str, Any]], Any]


def new_run(task_path: Path, settings: RunSettings, *, check_import: bool = True) -> tuple[str, Path, Task]:
    """Make a run folder for the task (``optimize(None, ..., resume=run_dir)`` starts it).
    ``check_import``: import the task here to check its entry points (else only its workers do)."""
    task = load_task(task_path, check_import=check_import)
    run_id = f"{task.name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    run_dir = (output_folder(settings.out) / run_id).resolve()  # kforge's own folder: git-ignored
    (run_dir / "task").mkdir(parents=True)
    shutil.copyfile(task.path, run_dir / "task" / task.path.name)
    meta = {"run_id": run_id, "task": f"task/{task.path.name}", "settings": settings.to_json()}
    (run_dir / "run.json").write_text(json.dumps(meta, indent=2))
    copied = load_task(run_dir / "task" / task.path.name, check_import=False)  # checked above: same bytes
    if copied.hash != task.hash:
        raise TaskError(f"{task.path}: changed while it was copied into {run_dir}; run again")
    return run_id, run_dir, copied


def saved_settings(run_dir: Path) -> dict[str, Any]:
    settings: dict[str, Any] = json.loads((run_dir / "run.json").read_text())["settings"]
    return settings


def _remember(rc: RunContext, source: str, result: Result) -> None:
    """Offer the run's winner, measured on this GPU, to the retrieval store."""
    try:
        message = remember_winner(rc.task, source, result, rc.hardware)
    except RetrievalMissing as err:
        message = str(err)
    rc.emit(Notice(message=message))


def _context(
    task_path: str | Path | None,
    settings: RunSettings,
    policy: Policy | None,
    evaluator: Evaluator | None,
    on_event: EventSink | None,
    resume: Path | None,
    check_import: bool,
) -> tuple[RunContext, Path, str | None, bool]:
    """The run's folder (new, or ``resume``), its store and policy, recorded as started; the
    context the nodes get, the folder, the LLM model (None: embedded) and whether the policy
    was chosen here."""
    if resume is not None:
        run_dir = resume
        meta = json.loads((run_dir / "run.json").read_text())
        run_id = meta["run_id"]
        task = load_task(run_dir / meta["task"], check_import=check_import)
    elif task_path is not None:
        run_id, run_dir, task = new_run(Path(task_path), settings, check_import=check_import)
    else:
        raise SetupError("give a task file, or --resume RUN")
    store = TrajectoryStore(run_dir / "trajectories.db")
    model: str | None = None
    chosen_here = policy is None
    if policy is None:
        policy, model = choose_policy(settings, store=store, run_id=run_id)
    rc = RunContext(
        run_id=run_id,
        task=task,
        settings=settings,
        policy=policy,
        evaluator=evaluator or EngineEvaluator(),
        store=store,
        hardware=detect_gpu() if settings.device == "cuda" else None,
        on_event=fan_out([JsonlSink(run_dir / "events.jsonl"), on_event]),
        model=model,
    )
    store.start_run(run_id, task, policy=policy.name, model=model, settings=settings.to_json())
    return rc, run_dir, model, chosen_here


def optimize(
    task_path: str | Path | None,
    settings: RunSettings,
    policy: Policy | None = None,
    evaluator: Evaluator | None = None,
    on_event: EventSink | None = None,
    *,
    resume: Path | None = None,
    on_interrupt: InterruptHandler | None = None,
    check_import: bool = True,
) -> RunSummary:
    """Optimize one task (or resume the run in folder ``resume``) and write the run folder.
    Interrupts go to ``on_interrupt``; without one the run returns ``paused`` at the first.
    With ``check_import=False`` the task's code runs only in evaluation workers, never in
    this process (batch workers: a task that kills its importer costs only its own line)."""
    if policy is None:
        check_policy(settings)
    rc, run_dir, model, chosen_here = _context(
        task_path, settings, policy, evaluator, on_event, resume, check_import
    )
    run_id, store, policy = rc.run_id, rc.store, rc.policy
    resumed = resume is not None and (run_dir / "checkpoint.db").is_file()  # else made by new_run
    rc.emit(RunStarted(task=rc.task.name, run_dir=str(run_dir), policy=policy.name, resumed=resumed))
    if chosen_here and model is None:
        rc.emit(Notice(message=f"no LLM endpoint configured: using the {policy.name} policy"))
    config: RunnableConfig = {
        "configurable": {"thread_id": run_id},
        "recursion_limit": 20 * (settings.rounds + 2),
    }
    with open_graph(run_dir) as graph:
        started = graph.get_state(config).values if resume is not None else {}
        try:
            final = graph.invoke(
                None if started else {"run_id": run_id}, config, context=rc, durability="sync"
            )
            while final.get("__interrupt__") and on_interrupt is not None:
                answer = on_interrupt(final["__interrupt__"][0].value)
                final = graph.invoke(Command(resume=answer), config, context=rc, durability="sync")
        except (KeyboardInterrupt, RunStopped):
            store.finish_run(run_id, "stopped", STOPPED)
            write_outputs(store, run_id, run_dir)
            rc.emit(RunFailed(run_dir=str(run_dir), message=STOPPED))
            raise
        except LLMError as err:
            store.finish_run(run_id, "failed", str(err))
            write_outputs(store, run_id, run_dir)
            rc.emit(RunFailed(run_dir=str(run_dir), message=str(err)))
            state = graph.get_state(config).values
            best = state.get("best_attempt_id"), state.get("best_speedup")
            return RunSummary(run_id, run_dir, "failed", str(err), *best, None)
    return _finish(rc, run_dir, final)


def _finish(rc: RunContext, run_dir: Path, final: dict[str, Any]) -> RunSummary:
    """A run the graph ended, or paused at an interrupt nobody answered: its outputs and summary."""
    if final.get("__interrupt__"):
        kind = final["__interrupt__"][0].value.get("kind", "input")
        waiting = "the choice of what to build on" if kind == "choice" else f"{kind} approval"
        return RunSummary(rc.run_id, run_dir, "paused", f"waiting for {waiting}", None, None, None)
    reason = final.get("reason", "finished")
    rc.store.finish_run(rc.run_id, "finished", reason)
    best_path = write_outputs(rc.store, rc.run_id, run_dir)
    best_id, best_speedup = final.get("best_attempt_id"), final.get("best_speedup")
    if (
        best_path is not None
        and best_id
        and (best_speedup or 0) > 1
        and rc.settings.retrieval
        and rc.hardware
    ):
        _remember(rc, best_path.read_text(), Result.from_json(final["results"][best_id]))
    rc.emit(
        RunFinished(run_dir=str(run_dir), best_attempt_id=best_id, best_speedup=best_speedup, reason=reason)
    )
    return RunSummary(rc.run_id, run_dir, "finished", reason, best_id, best_speedup, best_path)
