"""``kforge chat`` through a real pseudo-terminal (pexpect): the embedded policy with an edited
plan, a model that calls a tool and streams its answer (the local replay server), Ctrl-C in
the middle of a round and ``--resume`` with nothing evaluated twice, ``/stop`` typed while a
round runs, ``/eval`` joining the attempts, ``/pick`` and the choice interrupt deciding what a
round builds on, bad input answered in one line. Everything runs on the CPU."""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

pexpect = pytest.importorskip("pexpect")

pytestmark = pytest.mark.slow  # end to end: left out of the quick loop (-m 'not slow and not gpu')

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


# Ctrl-C and /stop race a round in flight on a pty: on 2 busy cores one of three full-suite runs
# failed once (its output lost; alone, under CPU load and after the Ray tests it passed every
# time). A failure is run again, twice at most; the assertions are unchanged.
RACES_A_ROUND = pytest.mark.flaky(reruns=2)


@pytest.fixture(autouse=True)
def _cache(cache_dir: Path) -> Path:
    """Every session here caches in ``tmp_path / "cache"``: the conftest's, bytecode shared."""
    return cache_dir


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


def first_round_landed(tmp_path: Path, url: str, candidates: int):
    """A session on TASK whose first round runs (plan approved) until r1-c0 has landed."""
    child = spawn(tmp_path, str(TASK), "--rounds", "1", "--candidates", str(candidates), url=url)
    child.sendline("/run")
    child.expect_exact("approve the plan?")
    child.sendline("y")
    child.expect_exact("r1-c0 ok")
    return child


def stopped_mid_round(child) -> None:
    """Wait for the stop's message. A round that finished first (the stop came after it) fails
    here at once, not after the pty's timeout (that took 240 s)."""
    seen = child.expect_exact(["nothing evaluated is lost", "rounds done"])
    assert seen == 0, "the round finished before it was stopped"


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


def results_rows(run_dir: Path) -> dict[str, float]:
    """attempt id -> when its result was written (a result evaluated again would be a new write)."""
    with sqlite3.connect(run_dir / "trajectories.db") as conn:
        return dict(conn.execute("SELECT attempt_id, created_at FROM results").fetchall())


def run_dir_of(tmp_path: Path) -> Path:
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]  # and kforge's .gitignore
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
    assert "compile-default" in child.before and "features: {" not in child.before  # for people, not JSON
    child.sendline("e")
    child.expect_exact("plan> ")
    child.send("\rKeep it torch-only.\x1b\r")  # Esc Enter accepts the edited plan
    child.expect_exact("approved plan")
    child.expect_exact("r1-c0 verifying")  # the round is not silent: each candidate's phase
    child.expect_exact("r1-c0 timing")
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
    text, features = plan.rstrip().rsplit("\n", 1)
    assert text.endswith("Keep it torch-only.")  # the run followed the edited plan
    assert features.startswith("features: {")  # and kept the line the ranker learns from
    with sqlite3.connect(run_dir / "chat.db") as conn:
        lines = [row[0] for row in conn.execute("SELECT content FROM messages WHERE role='user'")]
    assert lines[:2] == ["/task " + str(FIXTURES / "replay_server.py"), "/frobnicate"]


@RACES_A_ROUND
def test_ctrl_c_mid_round_then_resume_evaluates_nothing_twice_and_the_model_calls_a_tool(tmp_path):
    answer = "r1-c1 is verified but interpreted Triton on the CPU: far slower than eager, keep r1-c0."
    tool_call = {"tool_calls": [{"name": "profile", "arguments": {"attempt_id": "r1-c1"}}]}
    recorded = json.loads((FIXTURES / "answers_kill.json").read_text())
    server = ReplayServer([*recorded, tool_call, answer]).start()
    try:
        child = first_round_landed(tmp_path, server.url, candidates=2)
        child.sendintr()  # Ctrl-C while r1-c1 (Triton, interpreted) is in flight
        stopped_mid_round(child)
        child.expect_exact(PROMPT)
        child.sendline("/quit")
        child.expect(pexpect.EOF)
        run_dir = run_dir_of(tmp_path)
        assert [e["attempt_id"] for e in evaluations(run_dir)] == ["r1-c0"]
        landed = results_rows(run_dir)
        assert set(landed) == {"baseline", "r1-c0"}  # r1-c1 was killed in flight: no result

        child = spawn(tmp_path, "--resume", str(run_dir), url=server.url)
        assert "> /run" in child.before and "resumed" in child.before  # the conversation is back on screen
        say(child, "/run", "r1-c0 ok", "(from store)", "r1-c1", "done")
        say(child, "why is r1-c1 slow?", "tool profile", answer)  # streamed word by word
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        server.stop()
    after = results_rows(run_dir)
    assert set(after) == {"baseline", "r1-c0", "r1-c1"}
    assert {k: after[k] for k in landed} == landed  # the baseline and r1-c0 were not measured again
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


def test_eval_joins_the_attempts_and_pick_and_the_choice_interrupt_set_what_rounds_build_on(tmp_path):
    """/eval records u1; /pick u1 makes round 2 build on it; with /choose on, the graph stops after
    round 2 (a LangGraph interrupt) and the answer r1-c0 makes round 3 build on that."""
    recorded = json.loads((FIXTURES / "answers_kill.json").read_text())
    plan, torch_only, critic = recorded[0], recorded[1], recorded[3]
    unparsable = "I would rather not write code today."
    answers = [plan, torch_only, critic, unparsable, "r2-c0 failed.", unparsable, "r3-c0 failed."]
    server = ReplayServer(answers).start()
    try:
        child = first_round_landed(tmp_path, server.url, candidates=1)
        child.expect_exact("done")
        child.expect_exact(PROMPT)
        out = say(child, "/pick 999", "/attempts lists them")
        assert out.count("error:") == 1 and "no attempt '999'" in out
        out = say(child, f"/eval {TASK}", "defining class ModelNew")
        assert out.count("error:") == 1 and "does not define class ModelNew" in out
        say(child, f"/eval {FIXTURES / 'candidates' / 'add_relu_triton.py'}", "recorded as u1")
        assert "user" in say(child, "/attempts", "u1")
        say(child, "/pick u1", "the next round builds on u1")
        say(child, "/choose on", "choose on")
        child.sendline("/run 2")
        child.expect_exact("r2-c0 format_error")
        child.expect_exact("build round 3 on which attempt?")
        child.sendline("r1-c0")
        child.expect_exact("r3-c0 format_error")
        child.expect_exact("all 3 rounds done")
        child.expect_exact(PROMPT)
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        server.stop()
    run_dir = run_dir_of(tmp_path)
    with sqlite3.connect(run_dir / "trajectories.db") as conn:
        parents = dict(conn.execute("SELECT attempt_id, parent FROM attempts").fetchall())
        (status,) = conn.execute("SELECT status FROM results WHERE attempt_id='u1'").fetchone()
    assert parents == {"r1-c0": "", "u1": "", "r2-c0": "u1", "r3-c0": "r1-c0"} and status == "ok"
    coder_prompts = [server.prompts()[i] for i in (1, 3, 5)]
    assert "Build on" not in coder_prompts[0]
    assert "### u1 (round 1, chosen by the user, user)" in coder_prompts[1]
    assert "### r1-c0 (round 1, chosen by the user, llm)" in coder_prompts[2]
    assert len(server.requests) == len(answers)


@RACES_A_ROUND
def test_stop_typed_mid_round_keeps_what_landed_and_run_finishes_the_round(tmp_path):
    recorded = json.loads((FIXTURES / "answers_kill.json").read_text())
    server = ReplayServer(recorded).start()
    try:
        child = first_round_landed(tmp_path, server.url, candidates=2)
        child.sendline("/stop")  # typed while r1-c1 (Triton, interpreted) is in flight
        stopped_mid_round(child)
        child.expect_exact(PROMPT)
        run_dir = run_dir_of(tmp_path)
        landed = results_rows(run_dir)
        assert set(landed) == {"baseline", "r1-c0"}
        with sqlite3.connect(run_dir / "trajectories.db") as conn:
            assert conn.execute("SELECT status FROM runs").fetchone() == ("stopped",)
        say(child, "/run", "r1-c0 ok", "(from store)", "r1-c1", "done")
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        server.stop()
    after = results_rows(run_dir)
    assert set(after) == {"baseline", "r1-c0", "r1-c1"}
    assert {k: after[k] for k in landed} == landed  # what landed was not written again
    events = evaluations(run_dir)
    assert sorted(e["attempt_id"] for e in events if not e["reused"]) == ["r1-c0", "r1-c1"]
    assert len(server.requests) == 4  # plan, two candidates, critic: none asked twice


def test_stop_interrupts_the_round_in_a_process_that_ignored_sigint():
    """A chat started with SIGINT ignored (``&`` in a script, nohup) still stops on /stop:
    the round takes Python's handler while it runs, and the process gets its setting back."""
    import io
    import signal
    import time

    from kforge.agent.chat.stopper import StopListener
    from rich.console import Console

    read, write = os.pipe()
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(KeyboardInterrupt), StopListener(Console(file=io.StringIO()), fd=read):
            os.write(write, b"/stop\n")
            time.sleep(10)  # the round, interrupted
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
        os.close(read)
        os.close(write)
