"""The whole loop on the CPU: the real evaluation engine, an LLM policy talking to a local
OpenAI-compatible server that replays recorded answers (Triton under the interpreter)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kforge.agent.run import optimize
from kforge.agent.settings import RunSettings
from kforge.agent.store import TrajectoryStore

pytestmark = pytest.mark.slow  # end to end: left out of the quick loop (-m 'not slow and not gpu')

FIXTURES = Path(__file__).parent / "fixtures" / "agent"
TASK = FIXTURES / "tasks" / "add_relu.py"


def _replay_module():
    spec = importlib.util.spec_from_file_location("kforge_agent_replay_server", FIXTURES / "replay_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ReplayServer = _replay_module().ReplayServer


def answers(name: str) -> list[str]:
    return json.loads((FIXTURES / f"answers_{name}.json").read_text())


@pytest.fixture(autouse=True)
def _isolated(cache_dir, monkeypatch):
    monkeypatch.setenv("KFORGE_CACHE", str(cache_dir))  # tmp_path / "cache", as cli_env says
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "KFORGE_MODEL"):
        monkeypatch.delenv(var, raising=False)


def cpu_settings(url: str, out: Path, **changes) -> RunSettings:
    base = dict(
        rounds=2, candidates=2, patience=5, device="cpu", timing_trials=3, retrieval=False,
        model="replay", base_url=url, api_key="test-key", retries=0, timeout_s=30, out=out,
    )  # fmt: skip
    return RunSettings(**{**base, **changes})


def cli(*args: str, env_out: Path) -> list[str]:
    return [
        sys.executable, "-c", "from kforge.agent.cli import main; main()", "optimize", *args, "--device", "cpu", "--no-retrieval",
        "--timing-trials", "3", "--model", "replay", "--api-key", "test-key", "--retries", "0",
        "--out", str(env_out), "--quiet",
    ]  # fmt: skip


def cli_env(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "KFORGE_MODEL")
    }
    env["KFORGE_CACHE"] = str(tmp_path / "cache")
    return env


def evaluations(run_dir: Path) -> list[dict]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["kind"] == "candidate_evaluated"]


def test_two_rounds_carry_measured_results_and_recover_a_malformed_answer(tmp_path):
    server = ReplayServer(answers("loop")).start()
    try:
        summary = optimize(TASK, cpu_settings(server.url, tmp_path))
    finally:
        server.stop()
    assert summary.status == "finished", summary.reason
    assert summary.reason == "all 2 rounds done"
    prompts = server.prompts()
    assert len(prompts) == 7  # plan, 2 coders, critic, 2 coders, critic
    round_two = prompts[4]
    assert "### r1-c0 (round 1, fastest verified, llm)" in round_two
    assert "status ok; speedup vs eager" in round_two and "timed by cpu wall clock" in round_two
    assert "r1-c1" in round_two and "format error: the answer has no" in round_two
    assert "r1-c0 (Triton, fused) verified" in round_two  # the critic's analysis

    store = TrajectoryStore(summary.run_dir / "trajectories.db")
    (trajectory,) = store.trajectories(summary.run_id)
    statuses = {s.attempt.attempt_id: s.result.status.value for s in trajectory.steps if s.result}
    assert statuses == {"r1-c0": "ok", "r1-c1": "format_error", "r2-c0": "ok", "r2-c1": "incorrect"}
    assert [s.attempt.attempt_id for s in trajectory.steps] == ["r1-c0", "r1-c1", "r2-c0", "r2-c1"]
    assert trajectory.analyses[1]["critic"].startswith("## Performance analysis")
    calls = store.llm_calls(summary.run_id)
    assert [c["role"] for c in calls] == ["planner", "coder", "coder", "critic", "coder", "coder", "critic"]
    assert all(c["prompt_tokens"] and c["completion_tokens"] and c["latency_s"] >= 0 for c in calls)

    best = summary.run_dir / "best.py"
    assert summary.best_attempt_id in ("r1-c0", "r2-c0")
    assert best.read_text() == next(
        s.attempt.source for s in trajectory.steps if s.attempt.attempt_id == summary.best_attempt_id
    )
    report = (summary.run_dir / "report.md").read_text()
    for attempt_id in statuses:
        assert f"#### {attempt_id}" in report
    assert "Critic's analysis" in report and (summary.run_dir / "checkpoint.db").is_file()
    page = (summary.run_dir / "report.html").read_text()  # the same attempts, as a page
    assert all(f'id="{attempt_id}"' in page for attempt_id in statuses) and "Critic&#x27;s analysis" in page


def _wait_for_result(out: Path, attempt_id: str, proc: subprocess.Popen, timeout_s: float = 180) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before it could be killed"
        for db in out.glob("*/trajectories.db"):
            try:
                with sqlite3.connect(db, timeout=5) as conn:
                    rows = conn.execute("SELECT 1 FROM results WHERE attempt_id=?", (attempt_id,)).fetchall()
            except sqlite3.OperationalError:
                continue  # tables not created yet
            if rows:
                return db.parent
        time.sleep(0.05)
    raise AssertionError(f"no result for {attempt_id} within {timeout_s} s")


def test_run_killed_mid_round_resumes_without_evaluating_again(tmp_path):
    out = tmp_path / "runs"
    server = ReplayServer(answers("kill")).start()
    try:
        proc = subprocess.Popen(
            cli(str(TASK), "--rounds", "1", "--candidates", "2", "--base-url", server.url, env_out=out),
            env=cli_env(tmp_path), start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            run_dir = _wait_for_result(out, "r1-c0", proc)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the run and its evaluation workers
            proc.wait()
        killed = {e["attempt_id"] for e in evaluations(run_dir)}
        assert killed == {"r1-c0"}, "r1-c1 should have been in flight when the run was killed"

        resumed = subprocess.run(
            cli("--resume", str(run_dir), "--base-url", server.url, env_out=out),
            env=cli_env(tmp_path), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        server.stop()
    assert resumed.returncode == 0, resumed.stderr
    events = evaluations(run_dir)
    fresh = [e["attempt_id"] for e in events if not e["reused"]]
    assert sorted(fresh) == ["r1-c0", "r1-c1"]  # each candidate evaluated exactly once
    assert [e["attempt_id"] for e in events if e["reused"]] == ["r1-c0"]
    assert len(server.requests) == 4  # the coder's answers were not asked for again
    assert (run_dir / "best.py").is_file()


def test_endpoint_going_away_gives_a_clear_error_and_a_resumable_run(tmp_path):
    out = tmp_path / "runs"
    recorded = answers("loop")
    server = ReplayServer(recorded, die_after=4).start()  # plan, 2 coders, critic; then gone
    failed = subprocess.run(
        cli(str(TASK), "--rounds", "2", "--candidates", "2", "--patience", "5", "--base-url", server.url, env_out=out),
        env=cli_env(tmp_path), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert failed.returncode == 1
    errors = [line for line in failed.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "unreachable" in errors[0], failed.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]  # and kforge's .gitignore
    calls = TrajectoryStore(run_dir / "trajectories.db").llm_calls(run_dir.name)
    assert len(calls) == 5 and calls[-1]["error"].startswith("EndpointUnreachable")

    again = ReplayServer(recorded[4:]).start()
    try:
        resumed = subprocess.run(
            cli("--resume", run_dir.name, "--base-url", again.url, env_out=out),
            env=cli_env(tmp_path), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        again.stop()
    assert resumed.returncode == 0, resumed.stderr
    fresh = [e["attempt_id"] for e in evaluations(run_dir) if not e["reused"]]
    assert sorted(fresh) == ["r1-c0", "r1-c1", "r2-c0", "r2-c1"]
    assert "r1-c0" in again.prompts()[0]  # round two's prompt carries round one's results
