"""The trajectory store: trajectories in order, and several processes writing at once."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from kforge.agent.store import AttemptRecord, LLMCallRecord, TrajectoryStore
from kforge.tools.result import Result, Status
from kforge.tools.task import Task

TASK = Task(name="t", path=Path("t.py"), source="class Model: pass\n")


def _write(path: str, worker: int, count: int) -> None:
    store = TrajectoryStore(Path(path))
    for i in range(count):
        attempt_id = f"r{worker}-c{i}"
        store.add_attempt("run", TASK.hash, AttemptRecord(attempt_id, worker, i, "src", "s"))
        store.add_result("run", attempt_id, Result(status=Status.OK))
        store.add_llm_call(
            "run", LLMCallRecord("coder", worker, "m", [{"role": "user", "content": "x"}], "y", 1, 1, 0.1)
        )


def test_trajectories_come_back_in_order_with_results_and_analyses(tmp_path):
    store = TrajectoryStore(tmp_path / "trajectories.db")
    store.start_run("run", TASK, policy="llm", model="m", settings={"rounds": 2})
    for round, idx in [(2, 1), (1, 1), (2, 0), (1, 0)]:
        store.add_attempt("run", TASK.hash, AttemptRecord(f"r{round}-c{idx}", round, idx, "src", "llm"))
    store.add_result("run", "r1-c0", Result(status=Status.INCORRECT, log="max abs err 2"))
    store.add_analysis("run", 1, "critic", "r1-c0 was wrong")
    (trajectory,) = store.trajectories("run")
    assert [s.attempt.attempt_id for s in trajectory.steps] == ["r1-c0", "r1-c1", "r2-c0", "r2-c1"]
    assert trajectory.steps[0].result is not None and trajectory.steps[0].result.log == "max abs err 2"
    assert trajectory.steps[1].result is None
    assert trajectory.analyses == {1: {"critic": "r1-c0 was wrong"}}
    store.add_result("run", "r1-c0", Result(status=Status.OK))  # a result is written once
    assert store.results("run")["r1-c0"].status is Status.INCORRECT


def test_several_processes_write_without_losing_rows(tmp_path):
    path = tmp_path / "trajectories.db"
    TrajectoryStore(path).start_run("run", TASK, policy="llm", model="m", settings={})
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_write, args=(str(path), w, 25)) for w in range(4)]
    for proc in workers:
        proc.start()
    for proc in workers:
        proc.join(60)
        assert proc.exitcode == 0
    store = TrajectoryStore(path)
    assert len(store.attempts("run")) == 100 and len(store.results("run")) == 100
    assert len(store.llm_calls("run")) == 100


def test_a_best_slower_than_eager_is_reported_as_such(tmp_path):
    """best.py is the fastest verified candidate even when eager is faster; the report says
    so instead of presenting it as an improvement."""
    from kforge.agent.policy.features import TaskFeatures
    from kforge.agent.policy.ranker_synth import SynthTask, write_store
    from kforge.agent.report import SLOWER, render_report

    features = TaskFeatures(launches=2, eager_ms=1.0)
    slow = SynthTask("slow", "conv", features, {"compile-default": -0.2, "cuda-graph": -0.05})
    fast = SynthTask("fast", "conv", features, {"compile-default": 0.3, "cuda-graph": None})
    write_store(tmp_path / "trajectories.db", [slow, fast])
    store = TrajectoryStore(tmp_path / "trajectories.db")
    slow_report = render_report(store, "slow-synthetic")
    assert "Best: r1-c1 at 0.966x" + SLOWER in slow_report
    fast_report = render_report(store, "fast-synthetic")
    assert "Best: r1-c0 at 1.23x" in fast_report and SLOWER not in fast_report
