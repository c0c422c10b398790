"""Contrastive selection, prompt rendering and the LLM client's typed errors."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

import openai
import pytest
from kforge.agent.policy.base import AttemptView, Context
from kforge.agent.policy.contrast import select_contrastive
from kforge.agent.policy.llm import AuthError, EndpointUnreachable, LLMPolicy, OpenAIChatClient, PromptTooLong
from kforge.agent.policy.render import coder_prompt, critic_prompt
from kforge.agent.store import LLMCallRecord
from kforge.tools.result import Result, Status, Timing
from kforge.tools.task import Task

FIXTURES = Path(__file__).parent / "fixtures" / "agent"
TASK = Task(
    name="add_relu",
    path=FIXTURES / "tasks" / "add_relu.py",
    source=(FIXTURES / "tasks" / "add_relu.py").read_text(),
)


def _server_class():
    spec = importlib.util.spec_from_file_location("kforge_agent_replay_server", FIXTURES / "replay_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ReplayServer


ReplayServer = _server_class()


def timed(ms: float) -> Timing:
    return Timing(median_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=0.0, trials=3)


def view(i: int, status: Status, candidate_ms: float | None = None, log: str = "") -> AttemptView:
    result = Result(
        status=status, log=log, eager=timed(1.0), candidate=timed(candidate_ms) if candidate_ms else None
    )
    return AttemptView(f"r1-c{i}", 1, f"# source {i}", result, "llm")


ATTEMPTS = [
    view(0, Status.OK, 0.5),
    view(1, Status.OK, 2.0),
    view(2, Status.COMPILE_ERROR, log="error: expected ';'"),
    view(3, Status.OK, 1.0),
    view(4, Status.OK, 0.8),
    view(5, Status.INCORRECT, log="max abs err 3.1"),
    view(6, Status.OK, 0.9),
    view(7, Status.FORMAT_ERROR, log="format error: no Code section"),
]


def test_selection_spans_fastest_median_slowest_and_failures():
    chosen = {item.view.attempt_id: item.label for item in select_contrastive(ATTEMPTS, cap=6)}
    assert chosen["r1-c0"] == "fastest verified"
    assert chosen["r1-c1"] == "slowest verified"
    assert "median verified" in chosen.values()
    assert {"r1-c2", "r1-c5", "r1-c7"} <= set(chosen)  # one failure of each status
    assert len(chosen) == 6


def context(attempts: list[AttemptView]) -> Context:
    return Context(
        task=TASK, hardware=None, precision="fp32", baseline=None, docs=[], attempts=attempts, round=2
    )


def test_prompts_carry_measured_figures_and_errors():
    prompt = coder_prompt(context(ATTEMPTS), "cpu", 0, 2)
    assert "speedup vs eager 2x" in prompt and "candidate 0.5 ms, eager 1 ms" in prompt
    assert "error: expected ';'" in prompt and "format error: no Code section" in prompt
    assert "## Performance analysis" in prompt and "candidate 1 of 2" in prompt
    critic = critic_prompt(context(ATTEMPTS), "cpu", ATTEMPTS[:2])
    assert "### r1-c0 (round 1, this round, llm)" in critic


def _client(url: str, **kw) -> OpenAIChatClient:
    return OpenAIChatClient(openai.OpenAI(base_url=url, api_key="k", max_retries=0, timeout=10, **kw), "m")


def test_endpoint_errors_are_typed_one_line_and_recorded():
    server = ReplayServer(
        [
            {"status": 401, "message": "bad key"},
            {"status": 400, "message": "This model's maximum context length is 8192"},
        ]
    ).start()
    calls: list[LLMCallRecord] = []
    policy = LLMPolicy(_client(server.url), device="cpu", on_call=calls.append)
    try:
        with pytest.raises(AuthError, match="refused the API key"):
            policy.plan(context([]))
        with pytest.raises(PromptTooLong, match="prompt too long"):
            policy.plan(context([]))
    finally:
        server.stop()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    with pytest.raises(EndpointUnreachable, match="unreachable") as err:
        LLMPolicy(_client(f"http://127.0.0.1:{port}/v1"), device="cpu", on_call=calls.append).plan(
            context([])
        )
    assert "\n" not in str(err.value)
    assert [c.error.split(":")[0] for c in calls] == ["AuthError", "PromptTooLong", "EndpointUnreachable"]
    assert all(c.messages[-1]["content"].startswith("You are kforge's planner") for c in calls)


def test_the_planner_retrieves_only_for_a_policy_that_reads_documents(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The embedded policy reads no documents: loading the store and the embedding model for it
    cost some 9 s of CPU a run. The LLM policy's prompts carry them."""
    from types import SimpleNamespace

    from kforge.agent.nodes import planner
    from kforge.agent.policy.embedded import EmbeddedPolicy

    calls: list[str] = []
    monkeypatch.setattr(planner, "retrieve_docs", lambda task, hardware, budget: calls.append(task) or [])
    settings = SimpleNamespace(retrieval=True, retrieval_budget_chars=100)
    for policy, expected in ((EmbeddedPolicy(), []), (LLMPolicy(client=None, device="cpu"), ["task"])):  # type: ignore[arg-type]
        calls.clear()
        planner._docs(SimpleNamespace(settings=settings, policy=policy, task="task", hardware=None))  # type: ignore[arg-type]
        assert calls == expected, policy.name
