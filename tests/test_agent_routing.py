"""Stop rules, routing, and the graph driven offline with a scripted policy and a fake evaluator."""

from __future__ import annotations

from pathlib import Path

import pytest
from kforge.agent.events import Event
from kforge.agent.nodes.critic import Progress, decide
from kforge.agent.policy.base import Proposal
from kforge.agent.routing import RoutingError, after_critic
from kforge.agent.run import optimize
from kforge.agent.settings import RunSettings
from kforge.agent.store import TrajectoryStore
from kforge.tools.result import Result, Status, Timing

TASK = Path(__file__).parent / "fixtures" / "agent" / "tasks" / "add_relu.py"
SETTINGS = RunSettings(rounds=5, patience=2, wall_time_s=100, target_speedup=2.0, device="cpu")


def progress(**changes) -> Progress:
    base = dict(
        round=1, elapsed_s=0.0, best_speedup=1.2, rounds_without_improvement=0, failed_rounds_in_row=0
    )
    return Progress(**{**base, **changes})


@pytest.mark.parametrize(
    ("changes", "decision"),
    [
        ({}, "continue"),
        ({"best_speedup": 2.5}, "stop"),
        ({"round": 5}, "stop"),
        ({"elapsed_s": 101.0}, "stop"),
        ({"rounds_without_improvement": 2}, "stop"),
        ({"best_speedup": None, "failed_rounds_in_row": 2, "rounds_without_improvement": 1}, "replan"),
    ],
)
def test_stop_rules(changes, decision):
    assert decide(progress(**changes), SETTINGS)[0] == decision


def test_routing_follows_the_decision_and_raises_on_anything_else():
    assert after_critic({"decision": "continue"}) == "choose"
    assert after_critic({"decision": "replan"}) == "planner"
    assert after_critic({"decision": "stop"}) == "__end__"
    with pytest.raises(RoutingError):
        after_critic({})


class Scripted:
    """A policy whose candidates are labelled by round; 'bad' ones fail evaluation."""

    name = "scripted"

    def __init__(self, fail_rounds: set[int]) -> None:
        self.fail_rounds = fail_rounds
        self.plans = 0

    def plan(self, ctx):
        self.plans += 1
        return f"plan {self.plans}"

    def propose(self, ctx, k):
        kind = "bad" if ctx.round in self.fail_rounds else "good"
        return [
            Proposal(source=f"# {kind} r{ctx.round} c{i}\nclass ModelNew: pass\n", strategy="s")
            for i in range(k)
        ]

    def analyse(self, ctx, new):
        return f"analysis of round {ctx.round}"


class FakeEvaluator:
    """Speedup grows with the round; records every source it evaluated. Can die after N results."""

    def __init__(self, die_after: int | None = None) -> None:
        self.evaluated: list[str] = []
        self.baselines = 0
        self.die_after = die_after

    def measure_baseline(self, task, options):
        self.baselines += 1
        return Result(status=Status.OK, eager=Timing(1.0, 1.0, 1.0, 0.0, 3))

    def evaluate_many(self, task, sources, options, on_result=None, on_phase=None):
        results = []
        for i, source in enumerate(sources):
            if self.die_after is not None and len(self.evaluated) >= self.die_after:
                raise KeyboardInterrupt  # the run is killed mid-round
            self.evaluated.append(source)
            round = int(source.split(" r")[1].split()[0])
            ms = 1.0 / (1.0 + round)
            status = Status.INCORRECT if "bad" in source else Status.OK
            timing = Timing(ms, ms, ms, 0.0, 3)
            result = Result(
                status=status,
                candidate=timing if status is Status.OK else None,
                eager=Timing(1.0, 1.0, 1.0, 0.0, 3),
            )
            results.append(result)
            if on_result:
                on_result(i, result)
        return results


def run(tmp_path, policy, evaluator, resume=None, **changes):
    settings = RunSettings(
        **{**dict(rounds=4, candidates=2, patience=3, device="cpu", retrieval=False, out=tmp_path), **changes}
    )
    events: list[Event] = []
    summary = optimize(
        TASK, settings, policy=policy, evaluator=evaluator, on_event=events.append, resume=resume
    )
    return summary, events


def test_two_failed_rounds_make_a_new_plan(tmp_path):
    policy = Scripted(fail_rounds={1, 2})
    summary, events = run(tmp_path, policy, FakeEvaluator())
    decisions = [e.decision for e in events if e.kind == "decision"]
    assert decisions == ["continue", "replan", "continue", "stop"]
    assert policy.plans == 2 and summary.best_attempt_id == "r4-c0"
    analyses = TrajectoryStore(summary.run_dir / "trajectories.db").analyses(summary.run_id)
    assert analyses[0]["plan"] == "plan 1" and analyses[2]["plan"] == "plan 2"


def test_target_speedup_stops_early(tmp_path):
    summary, _ = run(tmp_path, Scripted(set()), FakeEvaluator(), target_speedup=2.5)
    assert summary.reason == "target speedup 2.5x reached" and summary.best_attempt_id == "r2-c0"


def test_interrupted_round_resumes_without_evaluating_again(tmp_path):
    policy, first = Scripted(set()), FakeEvaluator(die_after=3)  # dies in round 2 after r2-c0
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, policy, first, rounds=2)
    (run_dir,) = tmp_path.iterdir()
    second = FakeEvaluator()
    summary, events = run(tmp_path, policy, second, resume=run_dir, rounds=2)
    assert summary.status == "finished"
    assert len(first.evaluated) == 3 and second.evaluated == ["# good r2 c1\nclass ModelNew: pass\n"]
    assert first.baselines == 1 and second.baselines == 0
    reused = [e.attempt_id for e in events if e.kind == "candidate_evaluated" and e.reused]
    assert reused == ["r2-c0"]


def test_a_round_with_nothing_proposed_stops_the_run() -> None:
    decision, reason = decide(progress(proposed=0), SETTINGS)
    assert decision == "stop" and reason.startswith("the policy has nothing more to try: every strategy")


class Recording(Scripted):
    """Records the attempt each round was told to build on (the user's choice)."""

    def __init__(self) -> None:
        super().__init__(set())
        self.bases: list[str | None] = []

    def propose(self, ctx, k):
        self.bases.append(ctx.base)
        return super().propose(ctx, k)


def test_the_choice_interrupt_pauses_after_a_round_and_the_answer_is_what_the_next_builds_on(tmp_path):
    """``kforge optimize --choose``: unanswered, the run pauses after round 1; resumed with
    ``Command(resume=attempt_id)`` (or "" to keep the policy's choice), the next round builds on it."""
    policy = Recording()
    paused, _ = run(tmp_path, policy, FakeEvaluator(), rounds=3, choose=True)
    assert (paused.status, paused.reason) == ("paused", "waiting for the choice of what to build on")
    asked: list[dict] = []

    def answer(payload: dict) -> str:
        asked.append(payload)
        return "r1-c1" if payload["round"] == 1 else ""

    settings = RunSettings(
        rounds=3, candidates=2, patience=3, device="cpu", retrieval=False, out=tmp_path, choose=True
    )
    done = optimize(
        None, settings, policy=policy, evaluator=FakeEvaluator(), resume=paused.run_dir, on_interrupt=answer
    )
    assert done.status == "finished" and [p["round"] for p in asked] == [1, 2]
    assert [c["attempt_id"] for c in asked[1]["candidates"]][:2] == ["r2-c0", "r2-c1"]  # fastest first
    assert policy.bases == [None, "r1-c1", None]  # the choice serves one round
    with pytest.raises(ValueError, match="no attempt 'r9-c9'"):
        optimize(
            TASK, settings, policy=Recording(), evaluator=FakeEvaluator(), on_interrupt=lambda p: "r9-c9"
        )
