"""The loop on a GPU: the replayed LLM answers with a CUDA and a Triton candidate for a real
task; both are compiled, verified and timed with CUDA events."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from kforge.agent.run import optimize
from kforge.agent.settings import RunSettings
from kforge.agent.store import TrajectoryStore

ROOT = Path(__file__).parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "agent"


def _server_class():
    spec = importlib.util.spec_from_file_location("kforge_agent_replay_server", FIXTURES / "replay_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ReplayServer


def coder_answer(candidate: str) -> str:
    code = (ROOT / "examples" / "candidates" / candidate).read_text()
    return f"## Performance analysis\nFirst round.\n\n## Plan\nOne pass per row.\n\n## Code\n```python\n{code}```\n"


@pytest.mark.gpu
def test_loop_with_cuda_and_triton_candidates_times_them_on_the_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("KFORGE_CACHE", str(tmp_path / "cache"))
    answers = [
        "Fuse the row max, sum and normalisation into one kernel per row.",
        coder_answer("softmax_cuda.py"),
        coder_answer("softmax_triton.py"),
        "## Performance analysis\nBoth read the row twice.\n\n## Next\nStop.",
    ]
    server = _server_class()(answers).start()
    settings = RunSettings(
        rounds=1, candidates=2, device="cuda", timing_trials=30, retrieval=False,
        model="replay", base_url=server.url, api_key="k", retries=0, out=tmp_path / "runs",
    )  # fmt: skip
    try:
        summary = optimize(ROOT / "examples" / "tasks" / "softmax.py", settings)
    finally:
        server.stop()
    assert summary.status == "finished", summary.reason
    (trajectory,) = TrajectoryStore(summary.run_dir / "trajectories.db").trajectories(summary.run_id)
    results = {s.attempt.attempt_id: s.result for s in trajectory.steps}
    for attempt_id, result in results.items():
        assert result is not None and result.status.value == "ok", (attempt_id, result and result.log)
        assert result.timing_label.startswith("cuda events") and result.device == "cuda"
        assert result.candidate_ms and result.candidate_ms > 0 and result.speedup_vs_eager is not None
        assert result.roofline is not None and result.roofline_fraction is not None
    assert {r.backend for r in results.values() if r} == {"cuda", "triton"}
    assert (summary.run_dir / "best.py").is_file()
    assert (
        "r1-c0" in server.prompts()[-1] and "cuda events" in server.prompts()[-1]
    )  # the critic saw the figures
