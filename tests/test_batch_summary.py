"""The batch summary's figures: correct rate, fast_p, geometric means, per level."""

from __future__ import annotations

import json

import pytest
from kforge.agent.batch_summary import summary, write_summary


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
