"""``kforge chat`` through a real pseudo-terminal (pexpect): the embedded policy with an edited
plan, a model that calls a tool and streams its answer (the local replay server), Ctrl-C in
the middle of a round and ``--resume`` with nothing evaluated twice, bad input answered in
one line. Everything runs on the CPU."""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

pexpect = pytest.importorskip("pexpect")

FIXTURES = Path(__file__).parent / "fixtures" / "agent"
TASK = FIXTURES / "tasks" / "add_relu.py"
KFORGE = Path(sys.executable).parent / "kforge"
PROMPT = "kforge> "


def _replay_module():
    spec = importlib.util.spec_from_file_location("kforge_chat_replay_server", FIXTURES / "replay_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ReplayServer = _replay_module().ReplayServer


def spawn(tmp_path: Path, *args: str, url: str | None = None):
    """``kforge chat`` in a pty; TERM=dumb keeps prompt_toolkit's and rich's output plain text."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "KFORGE_MODEL")
    }
    env.update(KFORGE_CACHE=str(tmp_path / "cache"), TERM="dumb", COLUMNS="200")
    llm = ["--base-url", url, "--model", "replay", "--api-key", "test-key"] if url else []
    flags = ["--device", "cpu", "--no-retrieval", "--timing-trials", "3", "--out", str(tmp_path / "runs")]
    child = pexpect.spawn(
        str(KFORGE),
        ["chat", *args, *flags, *llm],
        env=env,
        encoding="utf-8",
        timeout=240,
        dimensions=(60, 200),
    )
    child.logfile_read = sys.stdout  # the session shows in pytest's output on failure
    child.expect_exact(PROMPT)
    return child


def say(child, line: str, *expected: str) -> str:
    """Type a line; wait for each expected text, then the next prompt. What was printed."""
    child.sendline(line)
    seen = ""
    for text in expected:
        child.expect_exact(text)
        seen += child.before + text
    child.expect_exact(PROMPT)
    return seen + child.before


def evaluations(run_dir: Path) -> list[dict]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["kind"] == "candidate_evaluated"]


def run_dir_of(tmp_path: Path) -> Path:
    (run_dir,) = (tmp_path / "runs").iterdir()
    return run_dir


def test_session_without_llm_edits_the_plan_runs_a_round_and_saves_the_best(tmp_path):
    child = spawn(tmp_path)
    # bad input: one line each, and the session goes on
    out = say(child, "/task " + str(FIXTURES / "replay_server.py"), "not a KernelBench task")
    assert out.count("error:") == 1
    assert "unknown command /frobnicate" in say(child, "/frobnicate", "/help lists")
    assert "no task loaded" in say(child, "/attempts", "/task FILE first")
    assert "embedded policy" in say(child, "how do I make this faster?", "OPENAI_BASE_URL")

    say(child, f"/task {TASK}", "loaded add_relu")
    child.sendline("/run 1")
    child.expect_exact("approve the plan?")
    child.sendline("e")
    child.expect_exact("plan> ")
    child.send("\rKeep it torch-only.\x1b\r")  # Esc Enter accepts the edited plan
    child.expect_exact("approved plan")
    child.expect_exact("r1-c0 ok")
    child.expect_exact("done")
    child.expect_exact(PROMPT)
    assert "r1-c0" in say(child, "/attempts", "compile-default")
    assert "class ModelNew" in say(child, "/show r1-c0", "speedup vs eager")
    assert "+class ModelNew" in say(child, "/diff task r1-c0", "@@")
    out = say(child, "/show r7-c3", "/attempts lists them")
    assert out.count("error:") == 1
    saved = tmp_path / "mine.py"
    say(child, f"/save {saved}", "saved r1-c0")
    child.sendline("/quit")
    child.expect(pexpect.EOF)

    run_dir = run_dir_of(tmp_path)
    assert saved.read_text() == (run_dir / "best.py").read_text()
    with sqlite3.connect(run_dir / "trajectories.db") as conn:
        (plan,) = conn.execute("SELECT text FROM analyses WHERE kind='plan'").fetchone()
    assert plan.rstrip().endswith("Keep it torch-only.")  # the run followed the edited plan
    with sqlite3.connect(run_dir / "chat.db") as conn:
        lines = [row[0] for row in conn.execute("SELECT content FROM messages WHERE role='user'")]
    assert lines[:2] == ["/task " + str(FIXTURES / "replay_server.py"), "/frobnicate"]


def test_ctrl_c_mid_round_then_resume_evaluates_nothing_twice_and_the_model_calls_a_tool(tmp_path):
    answer = "r1-c1 is verified but interpreted Triton on the CPU: far slower than eager, keep r1-c0."
    tool_call = {"tool_calls": [{"name": "profile", "arguments": {"attempt_id": "r1-c1"}}]}
    recorded = json.loads((FIXTURES / "answers_kill.json").read_text())
    server = ReplayServer([*recorded, tool_call, answer]).start()
    try:
        child = spawn(tmp_path, str(TASK), "--rounds", "1", "--candidates", "2", url=server.url)
        child.sendline("/run")
        child.expect_exact("approve the plan?")
        child.sendline("y")
        child.expect_exact("r1-c0 ok")
        child.sendintr()  # Ctrl-C while r1-c1 (Triton, interpreted) is in flight
        child.expect_exact("nothing evaluated is lost")
        child.expect_exact(PROMPT)
        child.sendline("/quit")
        child.expect(pexpect.EOF)
        run_dir = run_dir_of(tmp_path)
        assert [e["attempt_id"] for e in evaluations(run_dir)] == ["r1-c0"]

        child = spawn(tmp_path, "--resume", str(run_dir), url=server.url)
        assert "> /run" in child.before and "resumed" in child.before  # the conversation is back on screen
        say(child, "/run", "r1-c0 ok", "(from store)", "r1-c1", "done")
        say(child, "why is r1-c1 slow?", "tool profile", answer)  # streamed word by word
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        server.stop()
    events = evaluations(run_dir)
    assert sorted(e["attempt_id"] for e in events if not e["reused"]) == ["r1-c0", "r1-c1"]
    assert [e["attempt_id"] for e in events if e["reused"]] == ["r1-c0"]
    assert len(server.requests) == 6  # plan, two candidates, critic (none asked twice), then the chat
    asked, told = server.requests[4:]
    assert asked["stream"] is True and "evaluate" in {t["function"]["name"] for t in asked["tools"]}
    (tool_message,) = [m for m in told["messages"] if m["role"] == "tool"]
    assert json.loads(tool_message["content"])["status"] == "ok"  # r1-c1's measured result went back
    with sqlite3.connect(run_dir / "chat.db") as conn:
        assert conn.execute("SELECT content FROM messages WHERE role='assistant'").fetchall() == [(answer,)]


def test_plan_approval_interrupt_pauses_the_run_and_resumes_with_the_edited_plan(tmp_path, monkeypatch):
    """The interrupt ``kforge optimize --approve`` and chat answer: unanswered, the run is paused
    at the plan; resumed with ``Command(resume=...)``, the coder gets the edited plan."""
    from kforge.agent.run import optimize
    from kforge.agent.settings import RunSettings

    monkeypatch.setenv("KFORGE_CACHE", str(tmp_path / "cache"))
    recorded = json.loads((FIXTURES / "answers_kill.json").read_text())
    server = ReplayServer([recorded[0], recorded[1], recorded[3]]).start()  # plan, one candidate, critic
    settings = RunSettings(
        rounds=1, candidates=1, device="cpu", timing_trials=3, retrieval=False, approve=True,
        model="replay", base_url=server.url, api_key="test-key", retries=0, out=tmp_path / "runs",
    )  # fmt: skip
    try:
        paused = optimize(TASK, settings)
        assert (paused.status, paused.reason) == ("paused", "waiting for plan approval")
        assert len(server.requests) == 1 and not evaluations(paused.run_dir)

        asked: list[dict] = []

        def edit(payload: dict) -> str:
            asked.append(payload)
            return payload["plan"] + "\nUser: keep it torch-only."

        done = optimize(None, settings, resume=paused.run_dir, on_interrupt=edit)
    finally:
        server.stop()
    assert done.status == "finished" and [p["kind"] for p in asked] == ["plan"]
    assert len(server.requests) == 3  # the plan was not asked for again
    assert "User: keep it torch-only." in server.prompts()[1]  # the coder followed the edited plan
    assert [e["attempt_id"] for e in evaluations(done.run_dir)] == ["r1-c0"]
