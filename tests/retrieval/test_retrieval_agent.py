"""The agent's use of retrieval: a run's verified winner goes into the store once."""

from __future__ import annotations

from pathlib import Path

import pytest
from kforge.agent.retrieve import RetrievalMissing, remember_winner
from kforge.tools.hardware import spec_for
from kforge.tools.result import Result, Status, Timing
from kforge.tools.task import load_task

FIXTURES = Path(__file__).parent.parent / "fixtures"


def _ok_result() -> Result:
    timing = Timing(median_ms=0.5, min_ms=0.5, max_ms=0.6, iqr_ms=0.01, trials=50)
    eager = Timing(median_ms=1.0, min_ms=1.0, max_ms=1.1, iqr_ms=0.01, trials=50)
    return Result(status=Status.OK, correct=True, backend="torch-only", candidate=timing, eager=eager)


def test_winner_is_added_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("chromadb")
    monkeypatch.setenv("KFORGE_CACHE", str(tmp_path))
    task = load_task(FIXTURES / "tasks" / "scale_relu.py")
    source = (FIXTURES / "candidates" / "scale_relu_torch.py").read_text()
    first = remember_winner(task, source, _ok_result(), spec_for("H100-SXM"))
    again = remember_winner(task, source, _ok_result(), spec_for("H100-SXM"))
    assert first.startswith("added: kernel/")
    assert again.startswith("already stored: kernel/")


def test_a_rejected_winner_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("chromadb")
    monkeypatch.setenv("KFORGE_CACHE", str(tmp_path))
    task = load_task(FIXTURES / "tasks" / "scale_relu.py")
    rejected = _ok_result()
    rejected.status, rejected.cheats = Status.REJECTED, ["results cached across calls"]
    with pytest.raises(RetrievalMissing, match="only verified kernels"):
        remember_winner(task, "class ModelNew: pass\n", rejected, None)
