"""The batch summary's figures: correct rate, fast_p, geometric means, per level."""

from __future__ import annotations

import json

import pytest
from kforge.agent.batch.summary import summary, write_summary


def _line(task, level, status="ok", vs_eager=None, compile_gain=1.25, rejected=0):
    line = {"task": task, "level": level, "status": status, "rejected": rejected, "elapsed_s": 60.0}
    if vs_eager is not None:
        line |= {
            "speedup_vs_eager": vs_eager,
            "speedup_vs_compile": vs_eager / compile_gain,
            "result": {"cheats": []},
        }
    if status != "invalid_task":
        line["compile_speedup_vs_eager"] = compile_gain
    return line


LINES = [
    _line("level1/1", 1, vs_eager=2.5),
    _line("level1/2", 1, vs_eager=1.2, rejected=2),
    _line("level1/3", 1, vs_eager=0.8, compile_gain=0.8),
    _line("level1/4", 1, status="no_candidate"),
    _line("level2/1", 2, vs_eager=1.6),
    _line("bad", None, status="invalid_task"),
]


def test_fast_p_geomeans_and_levels():
    groups = summary(LINES)
    overall = groups["overall"]
    assert overall["valid_tasks"] == 5 and overall["invalid_tasks"] == 1 and overall["correct"] == 4
    assert overall["correct_rate"] == pytest.approx(0.8)
    assert overall["fast_vs_eager"] == {"1.0": 0.6, "1.5": 0.4, "2.0": 0.2}
    assert overall["geomean_vs_eager"] == pytest.approx((2.5 * 1.2 * 0.8 * 1.6) ** 0.25)
    assert overall["fast_vs_compile"]["1.0"] == pytest.approx(0.4)  # 2.0, 0.96, 1.0 (not > 1), 1.28
    assert overall["rejected_attempts"] == 2 and overall["reported_cheats"] == 0
    assert overall["best_of_eager_compile_geomean"] == pytest.approx((1.25**4) ** 0.2)  # 0.8 counts as 1
    assert groups["level1"]["valid_tasks"] == 4 and groups["level2"]["correct"] == 1


def test_write_summary_files(tmp_path):
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in LINES))
    write_summary(tmp_path, {"policy": "embedded", "device": "cuda", "precision": "fp32"})
    md = (tmp_path / "summary.md").read_text()
    assert "| overall (6) | 5 | 0.80 | 0.60 / 0.40 / 0.20 |" in md and "| level2 (1) |" in md
    assert "![speedup distribution](speedups.png)" in md and (tmp_path / "speedups.png").stat().st_size > 1000
    assert json.loads((tmp_path / "summary.json").read_text())["overall"]["correct"] == 4


def test_speedups_come_from_the_candidates_window_when_it_timed_compile():
    from kforge.agent.batch.job import speedups
    from kforge.tools.result import Result, Status, Timing

    def timing(ms: float) -> Timing:
        return Timing(median_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=0.0, trials=3)

    def result(eager: float, compiled: float | None, candidate: float | None) -> Result:
        return Result(
            status=Status.OK,
            precision="fp32",
            device="cuda",
            eager=timing(eager),
            compiled=timing(compiled) if compiled else None,
            candidate=timing(candidate) if candidate else None,
        )

    # KernelBench L3 29 (SwinMLP) on 4x H200: eager 13.3 ms in the baseline worker, 6.1 ms beside the candidate
    baseline = result(13.3, 8.9, None)
    beside = speedups(result(6.1, 5.6, 4.6), baseline)
    assert beside["speedup_vs_eager"] == pytest.approx(6.1 / 4.6)
    assert beside["speedup_vs_compile"] == pytest.approx(5.6 / 4.6)  # not (6.1 / 4.6) / (13.3 / 8.9) = 0.89
    assert beside["compile_speedup_vs_eager"] == pytest.approx(6.1 / 5.6)
    unconfirmed = speedups(result(6.1, None, 4.6), baseline)  # no compile beside it: the baseline's ratio
    assert unconfirmed["speedup_vs_compile"] == pytest.approx((6.1 / 4.6) / (13.3 / 8.9))
    assert speedups(result(6.1, None, 4.6), None)["speedup_vs_compile"] is None
