"""Dataset export from trajectories recorded by real CPU runs (tests/fixtures/train/runs, made
by make_stores.py: the real engine, a replayed LLM proposing verified, incorrect, cheating and
malformed candidates on two tasks)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
from kforge.agent.cli import app
from kforge.agent.policy.parse import to_proposal
from kforge.agent.settings import RunSettings
from kforge.agent.store import AttemptRecord, TrajectoryStore
from kforge.agent.train.export import export, split_tasks
from kforge.agent.train.reward import REJECTED, reward_of
from kforge.agent.train.samples import load_samples
from kforge.tools.result import Result, Status, Timing
from kforge.tools.task import Task
from typer.testing import CliRunner


@pytest.fixture(scope="module")
def samples(train_runs):
    return load_samples([train_runs])


def rows(folder: Path, split: str) -> list[dict]:
    return [json.loads(line) for line in (folder / f"{split}.jsonl").read_text().splitlines()]


def cheat_answers(samples) -> set[str]:
    return {s.answer for s in samples if s.result.status.value == "rejected"}


def test_the_fixture_runs_hold_every_kind_of_outcome(samples):
    statuses = {(s.task_name, s.attempt_id): s.result.status.value for s in samples}
    assert set(statuses.values()) == {"ok", "rejected", "incorrect"}
    assert {task for task, _ in statuses} == {"add_relu", "scale_relu"}
    assert all(s.prompt[0]["role"] == "system" and s.prompt[1]["role"] == "user" for s in samples)


def test_sft_targets_are_verified_answers_with_the_prompt_kforge_sent(samples, tmp_path):
    folder = export("sft", samples, tmp_path / "sft", test_fraction=0.5, min_speedup=0.0)
    train, test = rows(folder, "train"), rows(folder, "test")
    assert train and test
    assert not {r["task_name"] for r in train} & {r["task_name"] for r in test}  # split by task
    for record in train + test:
        answer = record["completion"][0]["content"]
        assert to_proposal(answer).source, "an SFT target that does not parse"
        assert answer not in cheat_answers(samples)
        assert record["speedup"] > 0
        assert f"# Task: {record['task_name']}" in record["prompt"][1]["content"]
    card = json.loads((folder / "card.json").read_text())
    assert card["splits"]["train"]["records"] == len(train)
    assert card["splits"]["test"]["speedup_vs_eager"]["max"] > 0
    assert "| train |" in (folder / "README.md").read_text()
    again = export("sft", samples + samples, tmp_path / "again", test_fraction=0.5, min_speedup=0.0)
    assert len(rows(again, "train")) == len(train)  # duplicates removed


def test_pairs_prefer_verified_and_never_choose_a_cheat(samples, tmp_path):
    folder = export("pairs", samples, tmp_path / "pairs", test_fraction=0.0)
    pairs = rows(folder, "train")
    assert {p["rejected_status"] for p in pairs} >= {"incorrect", "rejected"}
    cheats = cheat_answers(samples)
    for pair in pairs:
        assert pair["chosen_speedup"] > 0
        assert pair["chosen"][0]["content"] not in cheats
        assert pair["chosen"] != pair["rejected"]


def test_groups_carry_measured_variants_and_rewarded_candidates(samples, tmp_path):
    folder = export("groups", samples, tmp_path / "groups", test_fraction=0.0)
    groups = rows(folder, "train")
    assert len(groups) == 2  # round 2 of each task follows measured variants
    by_id = {(s.task_name, s.round, s.answer): s for s in samples}
    for group in groups:
        assert {v["status"] for v in group["variants"]} >= {"ok", "rejected"}
        assert "### r1-c0" in group["prompt"][1]["content"]  # the prompt shows them
        assert "class Model" in group["task_source"]
        for candidate in group["candidates"]:
            sample = by_id[(group["task_name"], 2, candidate["completion"][0]["content"])]
            assert candidate["reward"] == reward_of(sample.result) > REJECTED
            assert candidate["status"] != "rejected"


def test_an_embedded_run_gets_the_prompt_kforge_would_send(tmp_path, train_runs):
    run = tmp_path / "run"
    shutil.copytree(train_runs / "add_relu", run)
    with sqlite3.connect(run / "trajectories.db") as conn:
        conn.execute("DELETE FROM llm_calls")
    (sample,) = [s for s in load_samples([run]) if s.attempt_id == "r2-c0"]
    prompt = sample.prompt[1]["content"]
    assert "round 2, candidate 1 of 2" in prompt and "### r1-c0 (round 1, fastest verified" in prompt
    assert "r2-c0 verified" not in prompt  # nothing from its own round


def test_split_keeps_a_task_on_one_side():
    tasks = [f"t{i}" for i in range(10)]
    test = split_tasks(tasks, 0.2)
    assert len(test) == 2 and test == split_tasks(list(reversed(tasks)), 0.2)
    assert split_tasks(["only"], 0.5) == set()


def test_export_command_writes_the_dataset_and_fails_clearly(tmp_path, train_runs):
    runner = CliRunner()
    result = runner.invoke(app, ["export", "groups", str(train_runs), "--out", str(tmp_path / "g")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "g" / "card.json").is_file()
    bad = runner.invoke(app, ["export", "nonsense", str(train_runs), "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "one of sft, pairs, groups" in bad.output


def _timed(status: Status, speedup: float) -> Result:
    def timing(ms: float) -> Timing:
        return Timing(median_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=0.0, trials=3)

    return Result(status=status, device="cpu", candidate=timing(1.0), eager=timing(speedup))


CHEAT = "class ModelNew:  # caches its output\n    pass\n"


def _store(folder: Path, run_id: str, attempts: list[tuple[str, int, str, Result]]) -> TrajectoryStore:
    """A run of the scale_relu fixture task with the given (id, round, source, result) attempts."""
    folder.mkdir(parents=True)
    store = TrajectoryStore(folder / "trajectories.db")
    path = Path(__file__).parent / "fixtures" / "tasks" / "scale_relu.py"
    task = Task(name="scale_relu", path=path, source=path.read_text())
    store.start_run(run_id, task, policy="embedded", model=None, settings={"device": "cpu"})
    for index, (attempt_id, round_, source, result) in enumerate(attempts):
        store.add_attempt(run_id, task.hash, AttemptRecord(attempt_id, round_, index, source, f"s{index}"))
        store.add_result(run_id, attempt_id, result)
    store.finish_run(run_id, "finished", "all rounds done")
    return store


def test_a_cheat_copied_into_another_run_or_an_unconfirmed_best_is_never_a_target(tmp_path, monkeypatch):
    from kforge.agent.batch import job as batch

    # Run A rejected CHEAT. Run B (another store) saw the same source pass, twice; its best
    # (r2-c0) then failed the batch's confirmation, which the batch records in B's store.
    _store(
        tmp_path / "a", "run-a", [("r1-c0", 1, CHEAT, Result(status=Status.REJECTED, device="cpu"))]
    ).close()
    honest = [f"class ModelNew:\n    version = {i}\n" for i in range(4)]
    b = _store(tmp_path / "b", "run-b", [
        ("r1-c0", 1, CHEAT, _timed(Status.OK, 2.0)), ("r1-c1", 1, honest[0], _timed(Status.OK, 1.5)),
        ("r2-c0", 2, honest[1], _timed(Status.OK, 3.0)), ("r2-c1", 2, honest[2], _timed(Status.OK, 1.2)),
        ("r2-c2", 2, CHEAT, _timed(Status.OK, 2.5)), ("r2-c3", 2, honest[3], Result(status=Status.INCORRECT)),
    ])  # fmt: skip

    def confirm(task, sources, *args, on_result=None, **kw):  # every finalist fails its re-measure
        failed = [Result(status=Status.INCORRECT, device="cpu")] * len(sources)
        for i, result in enumerate(failed):
            if on_result is not None:
                on_result(i, result)
        return failed

    monkeypatch.setattr(batch, "_confirm", confirm)
    summary = SimpleNamespace(run_dir=tmp_path / "b", run_id="run-b", reason="done", best_attempt_id="r2-c0",
                              best_path=None)  # fmt: skip
    settings = RunSettings(device="cpu")
    options = batch.BatchOptions(
        out=tmp_path, settings=settings, finalists=1
    )  # finalists: test_batch_finalists
    line = batch._outcome(Task("scale_relu", Path("t.py"), ""), summary, settings, options)
    assert line["status"] == "unconfirmed"
    assert b.confirmations("run-b")["r2-c0"].status is Status.INCORRECT  # recorded as such
    b.close()

    samples = load_samples([tmp_path / "a", tmp_path / "b"])
    answers = {(s.run_id, s.attempt_id): s.answer for s in samples}
    banned = {answers[("run-b", i)] for i in ("r1-c0", "r2-c0", "r2-c2")}
    sft = rows(export("sft", samples, tmp_path / "sft", test_fraction=0.0, min_speedup=0.0), "train")
    assert {r["attempt"] for r in sft} == {"run-b/r1-c1", "run-b/r2-c1"}
    groups = rows(export("groups", samples, tmp_path / "groups", test_fraction=0.0), "train")
    members = [c["completion"][0]["content"] for g in groups for c in g["candidates"]]
    assert members == [answers[("run-b", "r2-c1")], answers[("run-b", "r2-c3")]]  # a wrong one has its reward
    pairs = rows(export("pairs", samples, tmp_path / "pairs", test_fraction=0.0), "train")
    assert pairs and not {p["chosen"][0]["content"] for p in pairs} & banned


def test_card_quartiles_lie_between_min_and_max():
    from kforge.agent.train.card import _distribution

    for values in ([0.5, 1.0, 4.0], [1.0, 2.0], [0.9, 1.1, 1.2, 3.0, 9.0]):
        d = _distribution(sorted(values))
        assert d is not None and d["min"] <= d["p25"] <= d["median"] <= d["p75"] <= d["max"], d
