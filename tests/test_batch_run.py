"""``kforge batch`` on the CPU end to end: a list of fixture tasks (one not a task, one
random), results.jsonl and the summary, bad input, and a batch killed mid-way resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "batch"
CLI = [sys.executable, "-c", "from kforge.agent.cli import main; main()", "batch"]
FAST = [
    "--device",
    "cpu",
    "--timing-trials",
    "3",
    "--trials",
    "2",
    "--rounds",  # what these tests check does not depend on the rounds: one is enough
    "1",
    "--strategies",
    "fx-rewrite,corpus-triton",
    "--quiet",
]


@pytest.fixture
def env(cache_dir):
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "KFORGE_MODEL")
    }
    env["KFORGE_CACHE"] = str(cache_dir)
    return env


def _lines(out: Path) -> list[dict]:
    path = out / "results.jsonl"
    return [json.loads(t) for t in path.read_text().splitlines()] if path.is_file() else []


def test_batch_over_a_list_records_every_task_and_summarises(tmp_path, env):
    listing = tmp_path / "tasks.txt"
    names = ["linear_sum", "not_a_task", "dropout_linear", "softmax_rows"]
    listing.write_text("".join(f"{FIXTURES / 'tasks' / n}.py\n" for n in names))
    out = tmp_path / "batch"
    done = subprocess.run(
        [*CLI, str(listing), *FAST, "--out", str(out)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = {x["task"]: x for x in _lines(out)}
    assert set(lines) == set(names)
    assert lines["not_a_task"]["status"] == "invalid_task" and "missing Model" in lines["not_a_task"]["error"]
    assert lines["dropout_linear"]["status"] == "no_candidate"
    for name, strategy in (
        ("linear_sum", "fx-rewrite[sum-of-linear]"),
        ("softmax_rows", "corpus:softmax_triton:"),
    ):
        line = lines[name]
        assert line["status"] == "ok" and line["best_strategy"].startswith(strategy), line.get("error")
        assert line["result"]["status"] == "ok" and line["confirmed"] and line["speedup_vs_eager"] > 0
        assert Path(line["best_path"]).is_file() and line["eager_ms"] > 0
        # the confirmation timed eager, torch.compile and the candidate in one window
        timed = {k: line["result"][k]["median_ms"] for k in ("candidate", "eager", "compiled")}
        assert line["compile_speedup_vs_eager"] == pytest.approx(timed["eager"] / timed["compiled"])
        assert line["speedup_vs_compile"] == pytest.approx(timed["compiled"] / timed["candidate"])
    summary = json.loads((out / "summary.json").read_text())["overall"]
    assert summary["valid_tasks"] == 3 and summary["correct"] == 2 and summary["invalid_tasks"] == 1
    assert (out / "summary.md").is_file() and (out / "speedups.png").is_file()
    page = (out / "report.html").read_text()  # links each task's run page, written by optimize
    assert all((Path(x["run_dir"]) / "report.html").is_file() for x in lines.values() if x.get("run_dir"))
    assert page.count('<a href="runs/') >= 4 and "data:image/png;base64," in page


def test_bad_input_exits_2(tmp_path, env):
    for args, message in (
        ([str(tmp_path / "missing"), "--device", "cpu"], "no such file"),
        ([str(FIXTURES / "tasks"), "--policy", "magic"], "unknown policy"),
        ([str(FIXTURES / "tasks"), "--device", "tpu"], "unknown device"),
        ([str(FIXTURES / "tasks"), "--policy", "llm", "--device", "cpu"], "needs an endpoint"),
        (["--resume", str(tmp_path)], "no batch to resume"),
    ):
        done = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)


def test_killed_batch_resumes_without_redoing_finished_tasks(tmp_path, env):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for i, name in enumerate(["not_a_task", "linear_sum", "softmax_rows"]):
        (tasks / f"{i + 1}_{name}.py").write_text((FIXTURES / "tasks" / f"{name}.py").read_text())
    out = tmp_path / "batch"
    proc = subprocess.Popen([*CLI, str(tasks), *FAST, "--out", str(out)], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 300
    while len(_lines(out)) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _lines(out)
    assert len(before) == 2 and before[0]["task"] == "1_not_a_task"
    done = subprocess.run(  # a new evaluation limit applies to the tasks still to run
        [*CLI, "--resume", str(out), "--quiet", "--eval-timeout", "240"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    after = _lines(out)
    assert [x["task"] for x in after] == ["1_not_a_task", "2_linear_sum", "3_softmax_rows"]
    assert after[:2] == before and after[2]["status"] == "ok"
    assert before[1]["eval_timeout_s"] == 300 and after[2]["eval_timeout_s"] == 240
    assert json.loads((out / "batch.json").read_text())["settings"]["eval_timeout_s"] == 240


def test_each_batch_worker_gets_its_share_of_the_host_for_compiling(monkeypatch):
    from kforge.agent.batch import share_of_host

    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    assert share_of_host(8, cpus=128) == {"TORCHINDUCTOR_COMPILE_THREADS": "16"}
    assert share_of_host(3, cpus=2) == {"TORCHINDUCTOR_COMPILE_THREADS": "1"}
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "4")  # the user's setting stays
    assert share_of_host(8, cpus=128) == {}
