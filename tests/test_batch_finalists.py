"""The batch's confirmation chooses among finalists: the search ranks candidates by their
speedup over an eager forward timed beside each in its own worker, which a busy host inflates
for launch-bound tasks. ALBERT (unseen5, 2026-11-27, H100): the search's best (2.23x over an
eager timed at 8.8 ms) came out 0.963x of torch.compile when measured again, while the
fastest candidate by its own time (3.46 ms, 1.55x over an eager at 5.4 ms) was never measured
again. These tests replay those figures."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from kforge.agent.batch import job
from kforge.agent.report import render_report
from kforge.agent.settings import RunSettings
from kforge.agent.state import BASELINE_ID
from kforge.agent.store import AttemptRecord, TrajectoryStore
from kforge.agent.train.samples import load_samples
from kforge.tools.result import COMPILE_FAILED, Result, Status, Timing
from kforge.tools.task import Task

TASK = Path(__file__).parent / "fixtures" / "tasks" / "scale_relu.py"


def _timing(ms: float) -> Timing:
    return Timing(median_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=0.0, trials=3)


def _result(
    candidate_ms: float, eager_ms: float, compile_ms: float | None = None, status=Status.OK
) -> Result:
    compiled = _timing(compile_ms) if compile_ms else None
    return Result(status=status, device="cuda", candidate=_timing(candidate_ms), eager=_timing(eager_ms),
                  compiled=compiled)  # fmt: skip


# ALBERT's search: (attempt, strategy, candidate ms, eager ms beside it)
SEARCH = [
    ("r1-c0", "triton-template[attention-sdpa]", 4.920, 5.406),
    ("r1-c1", "fx-rewrite[attention-sdpa]+compile-default", 3.961, 8.842),
    ("r1-c2", "compile-default", 4.222, 7.949),
    ("r2-c0", "fx-rewrite[attention-sdpa]+cpp-wrapper+compile-default", 3.751, 7.086),
    ("r2-c1", "fx-rewrite[attention-sdpa]", 4.992, 5.510),
    ("r2-c2", "cpp-wrapper+compile-default", 3.461, 5.374),
]


def _run(tmp_path: Path, search=SEARCH, duplicate: str | None = None) -> tuple[TrajectoryStore, dict, dict]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    store = TrajectoryStore(tmp_path / "trajectories.db")
    task = Task(name="albert", path=TASK, source=TASK.read_text())
    store.start_run("run", task, policy="embedded", model=None, settings={"device": "cuda"})
    for index, (attempt_id, strategy, ms, eager) in enumerate(search):
        source = (
            f"class ModelNew:  # {duplicate if attempt_id == 'r2-c2' and duplicate else strategy}\n    pass\n"
        )
        store.add_attempt(
            "run", task.hash, AttemptRecord(attempt_id, int(attempt_id[1]), index, source, strategy)
        )
        store.add_result("run", attempt_id, _result(ms, eager))
    store.finish_run("run", "finished", "all rounds done")
    attempts = {a.attempt_id: a for a in store.attempts("run")}
    return store, attempts, store.results("run")


def test_finalists_are_the_best_then_the_next_by_ratio_and_the_fastest_by_time(tmp_path: Path) -> None:
    store, attempts, results = _run(tmp_path)
    assert job.finalists(list(attempts.values()), results, "r1-c1", 3) == ["r1-c1", "r2-c2", "r2-c0"]
    assert job.finalists(list(attempts.values()), results, "r1-c1", 1) == ["r1-c1"]
    store.close()
    # one source measured twice (the same code under two names) is one finalist
    store, attempts, results = _run(tmp_path / "dup", duplicate="fx-rewrite[attention-sdpa]+compile-default")
    assert job.finalists(list(attempts.values()), results, "r1-c1", 3) == ["r1-c1", "r2-c0", "r1-c2"]
    store.close()


def _confirmations(measured: dict[str, Result], calls: list, compiled: list | None = None):
    """A stand-in for the engine's re-measure: each source's result by the strategy in its text
    (``NAME#2``: its second re-measure, where given); ``compiled`` hears whether each call
    timed torch.compile."""

    def confirm(task, sources, settings, trials, seed, on_result=None, time_compile=True):
        if compiled is not None:
            compiled.append(time_compile)
        names = [s.split("# ")[1].split("\n")[0] for s in sources]
        names = [job.AS_WRITTEN if n.endswith("own module, as written") else n for n in names]
        calls.append((seed, names))
        results = [measured.get(f"{n}#{seed}", measured[n]) for n in names]
        for i, result in enumerate(results):
            if on_result is not None:
                on_result(i, result)
        return results

    return confirm


def _outcome(
    tmp_path: Path, monkeypatch, measured: dict[str, Result], finalists: int = 3, resume: bool = False,
    source: str = "",
):  # fmt: skip
    if not resume:
        _run(tmp_path / "run")[0].close()
    (tmp_path / "run" / "task").mkdir(exist_ok=True)  # a finished run's folder: its reports are written again
    (tmp_path / "run" / "task" / "albert.py").write_text(TASK.read_text())
    (tmp_path / "run" / "run.json").write_text('{"run_id": "run", "task": "task/albert.py"}')
    calls: list = []
    monkeypatch.setattr(job, "_confirm", _confirmations(measured, calls))
    summary = SimpleNamespace(run_dir=tmp_path / "run", run_id="run", reason="done", best_attempt_id="r1-c1",
                              best_path=None)  # fmt: skip
    settings = RunSettings(device="cuda")
    options = job.BatchOptions(out=tmp_path, settings=settings, finalists=finalists)
    line = job._outcome(Task("albert", TASK, source), summary, settings, options)
    return line, calls, TrajectoryStore(tmp_path / "run" / "trajectories.db")


CONFIRMED = {  # as the confirmation measured them on ALBERT: candidate, eager, compile in one window
    "fx-rewrite[attention-sdpa]+compile-default": _result(3.724, 5.358, 3.587),
    "cpp-wrapper+compile-default": _result(3.43, 5.36, 3.59),
    "fx-rewrite[attention-sdpa]+cpp-wrapper+compile-default": _result(3.70, 5.35, 3.58),
}


def test_the_finalist_fastest_against_compile_is_chosen_and_measured_once_more(tmp_path, monkeypatch) -> None:
    final = _result(3.45, 5.40, 3.60)
    line, calls, store = _outcome(tmp_path, monkeypatch, CONFIRMED | {"cpp-wrapper+compile-default#2": final})
    assert calls == [
        (1, ["fx-rewrite[attention-sdpa]+compile-default", "cpp-wrapper+compile-default",
             "fx-rewrite[attention-sdpa]+cpp-wrapper+compile-default"]),
        (2, ["cpp-wrapper+compile-default"]),  # the reported figure is not the one it was chosen by
    ]  # fmt: skip
    assert line["status"] == "ok" and line["best_attempt_id"] == "r2-c2"
    assert line["best_strategy"] == "cpp-wrapper+compile-default"
    assert line["speedup_vs_compile"] == 3.60 / 3.45 and line["result"]["candidate"]["median_ms"] == 3.45
    assert [f["attempt_id"] for f in line["finalists"]] == ["r1-c1", "r2-c2", "r2-c0"]
    assert set(store.finalists("run")) == {"r1-c1", "r2-c2", "r2-c0"}
    assert list(store.confirmations("run")) == ["r2-c2"]
    # the run's report and best.py are the batch's choice, not the search's
    report = render_report(store, "run")
    assert "Best: r2-c2" in report and "Chosen among the search's finalists" in report
    assert "cpp-wrapper+compile-default\n" in (tmp_path / "run" / "best.py").read_text()
    assert "r2-c2 at" in (tmp_path / "run" / "report.html").read_text()
    store.close()


def test_one_finalist_is_measured_once_and_a_failed_finalist_is_no_training_target(
    tmp_path, monkeypatch
) -> None:
    line, calls, store = _outcome(tmp_path / "one", monkeypatch, CONFIRMED, finalists=1)
    assert calls == [(1, ["fx-rewrite[attention-sdpa]+compile-default"])]  # as before finalists
    assert line["best_attempt_id"] == "r1-c1" and line["speedup_vs_compile"] < 1
    store.close()
    # a finalist wrong on the new inputs: not chosen, recorded, and never a target
    wrong = CONFIRMED | {"cpp-wrapper+compile-default": _result(1.0, 5.4, 3.6, status=Status.INCORRECT)}
    line, calls, store = _outcome(tmp_path / "wrong", monkeypatch, wrong)
    assert line["best_attempt_id"] == "r2-c0" and calls[1] == (
        2,
        ["fx-rewrite[attention-sdpa]+cpp-wrapper+compile-default"],
    )
    assert store.finalists("run")["r2-c2"].status is Status.INCORRECT
    store.close()
    samples = {s.attempt_id: s for s in load_samples([tmp_path / "wrong" / "run"])}
    assert samples["r2-c2"].confirmation is Status.INCORRECT and samples["r1-c0"].confirmation is None


def test_a_finalist_caught_cheating_on_its_re_measure_is_not_chosen_and_never_a_target(
    tmp_path, monkeypatch
) -> None:
    """A candidate that passed the search and cheats when measured again (say it caches its
    output once it sees the same inputs twice): the judge rejects it there, the batch chooses
    another finalist, and its source is no example in any dataset exported from the run."""
    from kforge.agent.train.export import export

    caught = CONFIRMED | {"cpp-wrapper+compile-default": _result(0.01, 5.4, 3.6, status=Status.REJECTED)}
    line, _, store = _outcome(tmp_path, monkeypatch, caught)
    assert line["best_attempt_id"] == "r2-c0" and line["status"] == "ok"
    store.close()
    samples = load_samples([tmp_path / "run"])
    cheat = next(s for s in samples if s.attempt_id == "r2-c2")
    assert cheat.confirmation is Status.REJECTED
    honest = next(s for s in samples if s.attempt_id == "r2-c0")

    def rows(kind: str, **options: float) -> list[dict]:
        folder = export(kind, samples, tmp_path / kind, test_fraction=0.0, **options)
        return [json.loads(line) for line in (folder / "train.jsonl").read_text().splitlines()]

    targets = {r["completion"][0]["content"] for r in rows("sft", min_speedup=0.0)}
    chosen = {r["chosen"][0]["content"] for r in rows("pairs")}  # it may still be a pair's loser
    members = {c["completion"][0]["content"] for g in rows("groups") for c in g["candidates"]}
    for kind, answers in (("sft", targets), ("pairs", chosen), ("groups", members)):
        assert cheat.answer not in answers and honest.answer in answers, kind


def test_a_chosen_finalist_failing_its_confirmation_gives_way_to_the_next_fastest(
    tmp_path, monkeypatch
) -> None:
    """ChatGLM3's block (unseen8, H200): the 3xTF32 finalist passed the search and its first
    re-measure, then missed the tolerance on the confirmation's inputs, and the task had no
    answer. The next fastest finalist is measured once more in its place; the report says which
    was not kept; a resume measures nothing again."""
    wrong = _result(3.40, 5.40, 3.60, status=Status.INCORRECT)
    line, calls, store = _outcome(tmp_path, monkeypatch, CONFIRMED | {"cpp-wrapper+compile-default#2": wrong})
    assert calls[1:] == [
        (2, ["cpp-wrapper+compile-default"]),
        (2, ["fx-rewrite[attention-sdpa]+cpp-wrapper+compile-default"]),  # next against compile
    ]
    assert line["status"] == "ok" and line["best_attempt_id"] == "r2-c0"
    assert line["speedup_vs_compile"] == 3.58 / 3.70
    confirmations = {f["attempt_id"]: f.get("confirmation") for f in line["finalists"]}
    assert confirmations == {"r1-c1": None, "r2-c2": "incorrect", "r2-c0": "ok"}
    report = render_report(store, "run")
    assert "Best: r2-c0" in report and "not kept:\n\n- r2-c2: incorrect on the new inputs" in report
    store.close()
    samples = {s.attempt_id: s for s in load_samples([tmp_path / "run"])}
    assert samples["r2-c2"].confirmation is Status.INCORRECT  # no target
    again, calls, store = _outcome(tmp_path, monkeypatch, CONFIRMED, resume=True)
    assert calls == [] and again["best_attempt_id"] == "r2-c0" and again["result"] == line["result"]
    store.close()


def test_no_finalist_passing_leaves_the_search_best_unconfirmed(tmp_path, monkeypatch) -> None:
    failed = {k: _result(1.0, 5.4, 3.6, status=Status.INCORRECT) for k in CONFIRMED}
    line, calls, store = _outcome(tmp_path, monkeypatch, failed)
    assert len(calls) == 1 and line["status"] == "unconfirmed" and line["best_attempt_id"] == "r1-c1"
    assert store.confirmations("run")["r1-c1"].status is Status.INCORRECT
    store.close()


def _cut_off(tmp_path: Path, stored: dict[str, Result]) -> None:
    """A finished search whose confirmation was cut off after re-measuring ``stored``."""
    _run(tmp_path / "run")[0].close()
    store = TrajectoryStore(tmp_path / "run" / "trajectories.db")
    for attempt_id, result in stored.items():
        store.add_finalist("run", attempt_id, result)
    store.close()


def test_a_confirmation_cut_off_by_the_calls_end_resumes_with_the_finalists_it_measured(
    tmp_path, monkeypatch
) -> None:
    """KernelBench's 7 GB tasks took most of a 10-minute device call for their three finalists;
    the call's end cut them off and the resumed task measured all three again, and was cut off
    again. Each finalist's re-measure is stored as it ends: a resume measures only the others,
    and a confirmation already made is not made twice."""
    measured = CONFIRMED | {"cpp-wrapper+compile-default#2": _result(3.45, 5.40, 3.60)}
    _cut_off(tmp_path, {"r1-c1": CONFIRMED["fx-rewrite[attention-sdpa]+compile-default"]})
    line, calls, store = _outcome(tmp_path, monkeypatch, measured, resume=True)
    assert calls == [
        (1, ["cpp-wrapper+compile-default", "fx-rewrite[attention-sdpa]+cpp-wrapper+compile-default"]),
        (2, ["cpp-wrapper+compile-default"]),
    ], calls
    assert (
        line["status"] == "ok"
        and line["best_attempt_id"] == "r2-c2"
        and line["speedup_vs_compile"] == 3.60 / 3.45
    )
    store.close()
    calls.clear()  # cut off after the confirmation: nothing is measured again
    line, calls, store = _outcome(tmp_path, monkeypatch, measured, resume=True)
    assert calls == [] and line["speedup_vs_compile"] == 3.60 / 3.45
    store.close()


# Qwen1.5-MoE (unseen7, 2026-11-27, H100): torch.compile slower than eager, no CUDA graph
# possible, every candidate slower than eager: the batch chose one at 0.837x of eager.
SLOWER = {  # candidate, eager, compile in one window
    "fx-rewrite[attention-sdpa]+compile-default": _result(6.10, 5.10, 6.40),
    "cpp-wrapper+compile-default": _result(6.05, 5.12, 6.38),
    "fx-rewrite[attention-sdpa]+cpp-wrapper+compile-default": _result(6.20, 5.08, 6.41),
    job.AS_WRITTEN: _result(5.11, 5.10, 6.39),
    f"{job.AS_WRITTEN}#2": _result(5.09, 5.11, 6.42),
}


def test_where_nothing_beats_the_model_as_written_the_batch_answers_with_it(tmp_path, monkeypatch) -> None:
    line, calls, store = _outcome(tmp_path, monkeypatch, SLOWER, source=TASK.read_text())
    assert calls == [
        (1, ["fx-rewrite[attention-sdpa]+compile-default", "cpp-wrapper+compile-default",
             "fx-rewrite[attention-sdpa]+cpp-wrapper+compile-default", job.AS_WRITTEN]),
        (2, [job.AS_WRITTEN]),
    ]  # fmt: skip
    assert line["status"] == "ok" and line["best_attempt_id"] == job.AS_WRITTEN
    assert line["best_strategy"] == job.AS_WRITTEN and line["speedup_vs_compile"] == pytest.approx(
        6.42 / 5.09
    )
    assert line["attempts"] == {"ok": 6}  # the search's attempts only
    written = (tmp_path / "run" / "best.py").read_text()
    assert written == job.as_written_source(Task("albert", TASK, TASK.read_text()))
    assert "the task's own module" in render_report(store, "run")
    store.close()
    # the answer is no proposal: no training sample, no ranker example
    assert job.AS_WRITTEN not in {s.attempt_id for s in load_samples([tmp_path / "run"])}
    from kforge.agent.policy.strategies.registry import family_of

    assert family_of(job.AS_WRITTEN) == "combo"  # which the ranker's examples leave out
    # a resumed task finds it recorded: nothing measured again, no second record
    line, calls, store = _outcome(tmp_path, monkeypatch, SLOWER, source=TASK.read_text(), resume=True)
    assert calls == [] and line["best_attempt_id"] == job.AS_WRITTEN
    assert [a.attempt_id for a in store.attempts("run")].count(job.AS_WRITTEN) == 1
    store.close()


def test_a_candidate_faster_than_the_model_as_written_is_chosen_over_it(tmp_path, monkeypatch) -> None:
    measured = CONFIRMED | {"cpp-wrapper+compile-default#2": _result(3.45, 5.40, 3.60),
                            job.AS_WRITTEN: _result(5.36, 5.36, 3.59)}  # fmt: skip
    line, calls, _ = _outcome(tmp_path, monkeypatch, measured, source=TASK.read_text())
    assert calls[0][1][-1] == job.AS_WRITTEN and calls[1] == (2, ["cpp-wrapper+compile-default"])
    assert line["best_attempt_id"] == "r2-c2"
    # a tie goes to the search's candidate (the first of equals)
    tie = measured | {job.AS_WRITTEN: _result(3.43, 5.36, 3.59)}
    line, _, _ = _outcome(tmp_path / "tie", monkeypatch, tie, source=TASK.read_text())
    assert line["best_attempt_id"] == "r2-c2"


def test_the_model_as_written_is_a_candidate_the_judge_verifies(make_cpu_options) -> None:
    """Its source is an ordinary candidate: the real evaluator runs and verifies it."""
    from kforge.tools.evaluate import evaluate
    from kforge.tools.task import load_task

    task = load_task(TASK)
    source = job.as_written_source(task)
    assert source is not None and "class ModelNew" in source
    result = evaluate(task, source, make_cpu_options())
    assert result.status is Status.OK, result.log[-2000:]
    assert job.as_written_source(Task("broken", TASK, "def f(:\n")) is None


def test_the_summary_counts_answers_that_are_the_model_as_written() -> None:
    from kforge.agent.batch.summary import summarise

    lines = [
        {"task": "a", "status": "ok", "speedup_vs_eager": 1.0, "speedup_vs_compile": 1.25,
         "best_strategy": job.AS_WRITTEN},
        {"task": "b", "status": "ok", "speedup_vs_eager": 2.0, "speedup_vs_compile": 1.5,
         "best_strategy": "compile-default"},
    ]  # fmt: skip
    assert summarise(lines)["as_written"] == 1


def test_a_re_measure_gets_twice_the_search_s_time_for_its_two_compiles(monkeypatch) -> None:
    """The re-measure's worker compiles torch.compile's reference beside the candidate (the
    search's workers do not): DIEN's and FNFM's finalists (unseen7) timed out at the search's
    300 s. It gets twice that, and times compile, eager and the candidate together."""
    seen = []

    def evaluate_many(self, task, sources, options, on_result=None, on_phase=None):
        seen.append(options)
        return [_result(1.0, 2.0, 1.5) for _ in sources]

    monkeypatch.setattr(job.EngineEvaluator, "evaluate_many", evaluate_many)
    settings = RunSettings(device="cuda", eval_timeout_s=300.0)
    job._confirm(Task("t", TASK, TASK.read_text()), ["a", "b"], settings, trials=5, seed=2)
    assert seen[0].timeout_s == 600.0 and seen[0].compile_baseline and seen[0].seed == 2


def test_a_re_measure_that_timed_out_is_measured_again_by_a_resume(tmp_path, monkeypatch) -> None:
    """DIEN's and FNFM's finalists (unseen7) timed out at 300 s on a loaded host; a resume,
    whose limit or host may differ, measures such a finalist again, and a timed-out
    confirmation too. Within one run nothing is measured twice."""
    measured = CONFIRMED | {"cpp-wrapper+compile-default#2": _result(3.45, 5.40, 3.60)}
    timed_out = _result(1.0, 5.4, 3.6, status=Status.TIMEOUT)
    _cut_off(tmp_path, {"r2-c2": timed_out, "r1-c1": CONFIRMED["fx-rewrite[attention-sdpa]+compile-default"]})
    line, calls, store = _outcome(tmp_path, monkeypatch, measured, resume=True)
    assert calls == [
        (1, ["cpp-wrapper+compile-default", "fx-rewrite[attention-sdpa]+cpp-wrapper+compile-default"]),
        (2, ["cpp-wrapper+compile-default"]),
    ], calls
    assert line["best_attempt_id"] == "r2-c2" and store.finalists("run")["r2-c2"].status is Status.OK
    store.add_confirmation("run", "r2-c2", _result(1.0, 5.4, 3.6, status=Status.TIMEOUT))
    store.close()
    line, calls, store = _outcome(tmp_path, monkeypatch, measured, resume=True)
    assert calls == [(2, ["cpp-wrapper+compile-default"])] and line["status"] == "ok"
    assert line["speedup_vs_compile"] == pytest.approx(3.60 / 3.45)
    store.close()


def test_where_compile_of_the_reference_failed_the_re_measures_do_not_time_it(tmp_path, monkeypatch) -> None:
    """PointNet++ (unseen8): torch.compile of its reference ran past its share of the baseline's
    time. Beside each finalist it would again, for nothing: the re-measures time eager and the
    candidate, rank by the speedup over eager, and the line has no figure against compile."""
    store = _run(tmp_path / "run")[0]
    failed = f"{COMPILE_FAILED}: CompileTimeLimit: torch.compile of the reference did not finish in 210 s"
    store.add_result("run", BASELINE_ID, dataclasses.replace(_result(5.4, 5.4), log=failed))
    store.close()
    measured = {name: _result(r.candidate_ms or 0.0, r.eager_ms or 0.0) for name, r in CONFIRMED.items()}
    calls: list = []
    compiled: list = []
    monkeypatch.setattr(job, "_confirm", _confirmations(measured, calls, compiled))
    summary = SimpleNamespace(run_dir=tmp_path / "run", run_id="run", reason="done", best_attempt_id="r1-c1",
                              best_path=None)  # fmt: skip
    settings = RunSettings(device="cuda")
    line = job._outcome(
        Task("albert", TASK, ""), summary, settings, job.BatchOptions(out=tmp_path, settings=settings)
    )
    assert compiled == [False, False] and calls[1] == (
        2,
        ["cpp-wrapper+compile-default"],
    )  # fastest over eager
    assert line["status"] == "ok" and line["speedup_vs_compile"] is None
    assert line["speedup_vs_eager"] == pytest.approx(5.36 / 3.43)
