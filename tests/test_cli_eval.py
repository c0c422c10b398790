"""The command-line contract of ``kforge eval`` and ``kforge hw``: one JSON object on stdout
with the documented keys, exit 0 whenever a candidate was evaluated (whatever its status),
exit 2 with a one-line error on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # end to end: left out of the quick loop (-m 'not slow and not gpu')

FIXTURES = Path(__file__).parent / "fixtures"
TASK = FIXTURES / "tasks" / "scale_relu.py"
KFORGE = [sys.executable, "-c", "from kforge.agent.cli import main; main()"]
JSON_KEYS = {
    "status", "correct", "max_abs_err", "max_rel_err", "candidate_ms", "eager_ms", "compile_ms",
    "speedup_vs_eager", "speedup_vs_compile", "precision", "backend", "cheats", "roofline_fraction", "log",
}  # fmt: skip


def kforge(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KFORGE, *args], capture_output=True, text=True, timeout=300, env=_env(cache), check=False
    )


def _env(cache: Path) -> dict[str, str]:
    import os

    return {**os.environ, "KFORGE_CACHE": str(cache)}


def _eval_json(candidate: str, cache: Path) -> tuple[int, dict]:
    done = kforge(
        "eval", str(TASK), str(FIXTURES / candidate), "--device", "cpu", "--json",
        "--no-compile-baseline", "--timing-trials", "3", cache=cache,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout)


def test_json_contract_for_a_correct_candidate(cache_dir: Path) -> None:
    code, out = _eval_json("candidates/scale_relu_triton.py", cache_dir)
    assert code == 0
    assert JSON_KEYS <= out.keys()
    assert (out["status"], out["correct"], out["backend"], out["precision"]) == ("ok", True, "triton", "fp32")
    assert out["candidate_ms"] > 0 and out["eager_ms"] > 0
    assert out["speedup_vs_eager"] == pytest.approx(out["eager_ms"] / out["candidate_ms"])
    assert out["compile_ms"] is None  # --no-compile-baseline
    assert "cpu wall clock" in out["timing_label"]


def test_each_status_has_its_exit_code(cache_dir: Path, tmp_path: Path) -> None:
    """0 ok, 1 incorrect, 3 rejected, 4 format_error, 5 compile_error, 6 runtime_error, 7 timeout
    (2: bad input), as `kforge eval --help` says; a script or CI can act on them."""
    from kforge.agent.commands.eval import EXIT_CODES, EXIT_HELP

    code, out = _eval_json("candidates/wrong_output.py", cache_dir)
    assert (code, out["status"], out["correct"], out["speedup_vs_eager"]) == (1, "incorrect", False, None)
    code, out = _eval_json("cheats/try_fallback.py", cache_dir)
    assert (code, out["status"]) == (3, "rejected")
    assert out["cheats"]
    (tmp_path / "no_model.py").write_text("x = 1\n")
    code, out = _eval_json(str(tmp_path / "no_model.py"), cache_dir)
    assert (code, out["status"]) == (4, "format_error")
    assert (
        sorted(EXIT_CODES.values()) == [0, 1, 3, 4, 5, 6, 7]
        and "2 bad input" in kforge("eval", "--help", cache=cache_dir).stdout
    )
    assert EXIT_HELP.startswith("0 ok, 1 incorrect, 3 rejected")


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["eval", str(FIXTURES / "tasks" / "missing.py"), str(TASK)], "no such task file"),
        (["eval", str(TASK), str(FIXTURES / "nope.py"), "--device", "cpu"], "no such candidate file"),
        (["eval", str(TASK), str(TASK), "--device", "cpu", "--precision", "fp8"], "unknown precision"),
        (["eval", str(TASK), str(TASK), "--device", "tpu"], "unknown device"),
        (["eval", str(FIXTURES / "candidates" / "raises.py"), str(TASK), "--device", "cpu"], "missing"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], phrase: str, tmp_path: Path) -> None:
    done = kforge(*args, cache=tmp_path)
    assert done.returncode == 2, done.stderr
    assert phrase in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stdout == ""


def test_a_cuda_candidate_on_the_cpu_is_bad_input(tmp_path: Path) -> None:
    cuda = Path(__file__).parent.parent / "examples"
    done = kforge(
        "eval", str(cuda / "tasks" / "softmax.py"), str(cuda / "candidates" / "softmax_cuda.py"),
        "--device", "cpu", cache=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    assert "needs a GPU" in done.stderr


def test_hw_json_without_a_gpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    done = kforge("hw", "--json", cache=tmp_path)
    assert done.returncode == 0
    found = json.loads(done.stdout)
    assert found["gpu"] is None
    layers = [line.split(":")[0] for line in found["containment"]]
    assert layers == ["privileges", "filesystem", "signals", "tcp", "syscalls", "processes"]


def test_the_table_says_why_a_large_relative_error_passes_and_what_was_not_timed() -> None:
    from kforge.agent.tables import _result_rows
    from kforge.tools.result import Result, Status, Timing

    timed = Timing(median_ms=2.0, min_ms=1.9, max_ms=2.2, iqr_ms=0.1, trials=5)
    result = Result(
        Status.OK, device="cpu", correct=True, trials=5, max_abs_err=3e-5, max_rel_err=6.25e4,
        candidate=timed, eager=timed,
    )  # fmt: skip
    rows = dict(_result_rows(result))
    assert "1e-04 + 0.0001 * |ref|" in rows["tolerance"] or "0.0001 + 0.0001 * |ref|" in rows["tolerance"]
    assert "near zero" in rows["tolerance"]
    assert rows["torch.compile"] == "not timed on cpu (--compile-baseline)"
