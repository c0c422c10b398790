"""End-to-end evaluation on the CPU: correct, incorrect, crashing and malformed candidates
for the fixture tasks, each giving the right typed Status and its real message."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from kforge.tools import evaluate as engine
from kforge.tools.evaluate import EvalError, EvalOptions, evaluate, evaluate_many, measure_baseline
from kforge.tools.result import Result, Status
from kforge.tools.task import Task
from kforge.tools.timing import CPU_LABEL

pytestmark = pytest.mark.slow  # end to end: left out of the quick loop (-m 'not slow and not gpu')

# Candidates for scale_relu (tests/fixtures/candidates), evaluated together in one batch.
SCALE_RELU = [
    "scale_relu_torch",
    "scale_relu_triton",
    "wrong_output",
    "nan_output",
    "wrong_shape",
    "wrong_dtype",
    "not_written",
    "raises",
    "raises_at_import",
    "not_a_module",
    "wrong_constructor",
]
NO_MODEL_NEW = "import torch.nn as nn\n\nclass Model(nn.Module):\n    pass\n"
SYNTAX_ERROR = "import torch\n\nclass ModelNew(torch.nn.Module:\n    pass\n"


@pytest.fixture(scope="module")
def scale_relu(fixture_task: Callable[[str], Task]) -> Task:
    return fixture_task("scale_relu")


@pytest.fixture(scope="module")
def batch(
    scale_relu: Task,
    fixture_source: Callable[[str], str],
    make_session_cpu_options: Callable[..., EvalOptions],
) -> dict[str, Result]:
    sources = [fixture_source(f"candidates/{name}.py") for name in SCALE_RELU]
    sources += [NO_MODEL_NEW, SYNTAX_ERROR]
    seen: list[int] = []
    names = [*SCALE_RELU, "no_model_new", "syntax_error"]
    results = evaluate_many(
        scale_relu,
        sources,
        make_session_cpu_options(),
        on_result=lambda i, _: seen.append(i),
        on_phase=lambda i, phase: PHASES.setdefault(names[i], []).append(phase),
    )
    assert seen == list(range(len(sources)))  # the callback sees every result, in order
    return dict(zip(names, results, strict=True))


PHASES: dict[str, list[str]] = {}  # candidate -> the phases evaluate_many showed, in order


def test_each_candidate_shows_the_phases_it_went_through(batch: dict[str, Result]) -> None:
    """What the chat and optimize show while a round runs (loading, verifying, timing)."""
    assert PHASES["scale_relu_torch"] == ["loading", "verifying", "timing"]
    assert PHASES["wrong_output"] == ["loading", "verifying"]  # incorrect: never timed
    assert PHASES["raises_at_import"] == ["loading"]
    assert "syntax_error" not in PHASES  # refused before any worker started


@pytest.mark.parametrize("name", ["scale_relu_torch", "scale_relu_triton"])
def test_correct_candidates_are_ok_with_cpu_timings(batch: dict[str, Result], name: str) -> None:
    result = batch[name]
    assert result.status == Status.OK, result.log
    assert result.correct
    assert result.cheats == []
    assert result.trials == 5
    assert result.device == "cpu"
    assert result.precision == "fp32"
    assert result.max_abs_err is not None and result.max_abs_err <= 1e-4
    assert result.fp64_rel_err is not None and result.fp64_rel_err < 1e-5
    assert result.ref_fp64_rel_err is not None
    assert result.candidate is not None and result.candidate.median_ms > 0
    assert result.eager is not None and result.eager.median_ms > 0
    assert result.compiled is None  # compile_baseline=False
    assert result.speedup_vs_eager is not None and result.speedup_vs_eager > 0
    assert result.timing_label == CPU_LABEL
    assert result.roofline is not None and result.roofline.gpu is None and result.roofline.floor_ms is None
    assert result.roofline.min_bytes > 0
    assert "network:" in result.log
    assert len(result.source_hash) == 16


def test_backend_labels(batch: dict[str, Result]) -> None:
    assert batch["scale_relu_torch"].backend == "torch-only"
    assert batch["scale_relu_triton"].backend == "triton"


@pytest.mark.parametrize(
    ("name", "phrase"),
    [
        ("wrong_output", "differs: max abs err"),
        ("nan_output", "NaN/Inf values where the reference is finite"),
        ("wrong_shape", "shape (4112,), expected (16, 257)"),
        ("wrong_dtype", "dtype torch.float64, expected torch.float32"),
        # Elements it never writes hold NaN from the poisoned block, or the CPU allocator's
        # leftovers, which can even be a copy of the reference's output, so the call that fails
        # varies (poisoning is best effort on the CPU; tests/test_cheats_gpu.py asserts NaN).
        ("not_written", ": output 0"),
    ],
)
def test_incorrect_candidates(batch: dict[str, Result], name: str, phrase: str) -> None:
    result = batch[name]
    assert result.status == Status.INCORRECT, result.log
    assert not result.correct
    assert phrase in result.log
    assert result.cheats == []
    assert result.candidate is None  # never timed


def test_wrong_output_reports_error_figures(batch: dict[str, Result]) -> None:
    result = batch["wrong_output"]
    assert result.max_abs_err is not None and result.max_abs_err > 1e-4
    assert result.trials == 1


@pytest.mark.parametrize(
    ("name", "phrase"),
    [
        ("raises", "RuntimeError: kernel launch failed: kforge-test-marker"),
        ("raises_at_import", "candidate raises at import"),
    ],
)
def test_raising_candidates_are_runtime_errors(batch: dict[str, Result], name: str, phrase: str) -> None:
    result = batch[name]
    assert result.status == Status.RUNTIME_ERROR
    assert phrase in result.log


def test_import_error_message_is_kept(batch: dict[str, Result]) -> None:
    assert "ImportError: missing extension kforge_test_ext" in batch["raises_at_import"].log


@pytest.mark.parametrize(
    ("name", "phrase"),
    [
        ("not_a_module", "ModelNew is not a torch.nn.Module subclass"),
        ("wrong_constructor", "constructor does not take Model's arguments"),
        ("no_model_new", "does not define class ModelNew"),
        ("syntax_error", "not valid Python"),
    ],
)
def test_format_errors(batch: dict[str, Result], name: str, phrase: str) -> None:
    result = batch[name]
    assert result.status == Status.FORMAT_ERROR
    assert phrase in result.log


def test_results_round_trip_through_json(batch: dict[str, Result]) -> None:
    for result in batch.values():
        again = Result.from_json(result.to_json())
        assert again.status == result.status
        assert again.candidate_ms == result.candidate_ms
        assert again.log == result.log


def test_scratch_folders_are_removed(batch: dict[str, Result], session_cache_dir: Path) -> None:
    scratch = session_cache_dir / "scratch"
    assert not scratch.exists() or not [p for p in scratch.iterdir() if p.name.startswith("eval-")]


def test_workers_keep_their_bytecode_in_the_cache(batch: dict[str, Result], session_cache_dir: Path) -> None:
    """Even with PYTHONDONTWRITEBYTECODE set (CI and the device image set it), workers write
    the bytecode of what they import to the cache, so the next worker does not recompile torch."""
    compiled = list((session_cache_dir / "pycache").rglob("*.pyc"))
    assert any("torch" in p.parts for p in compiled), "no torch bytecode in the cache"
    assert any(p.name.startswith("runner.") for p in compiled), "no kforge bytecode in the cache"


def test_cuda_candidate_on_cpu_is_refused(
    scale_relu: Task, make_cpu_options: Callable[..., EvalOptions]
) -> None:
    source = (
        "from torch.utils.cpp_extension import load_inline\nimport torch.nn as nn\n\n"
        "class ModelNew(nn.Module):\n    pass\n"
    )
    with pytest.raises(EvalError, match="needs a GPU"):
        evaluate(scale_relu, source, make_cpu_options())


def test_unknown_device_is_refused(
    scale_relu: Task, fixture_source: Callable[[str], str], make_cpu_options: Callable[..., EvalOptions]
) -> None:
    with pytest.raises(EvalError, match="unknown device"):
        evaluate(scale_relu, fixture_source("candidates/scale_relu_torch.py"), make_cpu_options(device="tpu"))


def test_measure_baseline_times_the_reference(
    fixture_task: Callable[[str], Task], make_cpu_options: Callable[..., EvalOptions]
) -> None:
    result = measure_baseline(fixture_task("matmul_small"), make_cpu_options())
    assert result.status == Status.OK, result.log
    assert result.eager is not None and result.eager.median_ms > 0
    assert result.roofline is not None
    assert result.roofline.flops == 2 * 64 * 256 * 48
    assert result.timing_label == CPU_LABEL


@pytest.mark.timing  # what it needs is a ratio of times: run alone (beside the suite it once read 6.7x)
def test_speedup_over_10x_gets_the_strict_recheck(
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_cpu_options: Callable[..., EvalOptions],
) -> None:
    """An honest candidate against a reference that loops in Python: >10x, rechecked, kept."""
    result = evaluate(
        fixture_task("slow_reference"),
        fixture_source("candidates/slow_reference_torch.py"),
        make_cpu_options(),
    )
    assert result.status == Status.OK, result.log
    assert result.speedup_vs_eager is not None and result.speedup_vs_eager > 10
    assert any("passed the strict recheck" in flag for flag in result.flags)


def test_plain_check_times_the_baselines_in_plain_loops_too(
    fixture_task: Callable[[str], Task],
    make_cpu_options: Callable[..., EvalOptions],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bench_fidelity.py's reference: with KFORGE_PLAIN_CHECK=1 the worker also times eager
    alone in plain loops, before and after the interleaved rounds, and logs the medians."""
    monkeypatch.setenv("KFORGE_PLAIN_CHECK", "1")
    result = measure_baseline(fixture_task("matmul_small"), make_cpu_options())
    assert result.status == Status.OK, result.log
    line = next(x for x in result.log.splitlines() if x.startswith("plain loops before the rounds"))
    before, after = (float(part.split("eager ")[1].split()[0].rstrip(";")) for part in line.split("after:"))
    assert before > 0 and after > 0


def test_the_roofline_is_measured_once_per_task(
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_cpu_options: Callable[..., EvalOptions],
) -> None:
    """The reference's roofline is the same for every candidate: the first worker measures
    it, the next ones get it (a worker handed a roofline reports that one, not its own)."""
    task, options = fixture_task("matmul_small"), make_cpu_options()
    key = engine._roofline_key(task, options)
    engine._ROOFLINES.pop(key, None)
    source = fixture_source("candidates/matmul_small_torch.py")
    first = evaluate(task, source, options)
    assert first.status == Status.OK, first.log
    assert first.roofline is not None and engine._ROOFLINES[key] == first.roofline
    assert first.roofline.flops == 2 * 64 * 256 * 48
    engine._ROOFLINES[key] = dataclasses.replace(first.roofline, flops=123.0)
    try:
        second = evaluate(task, source, options)
    finally:
        engine._ROOFLINES.pop(key, None)
    assert second.roofline is not None and second.roofline.flops == 123.0


def test_an_input_made_by_expand_gets_new_values_between_calls(
    fixture_task: Callable[[str], Task], make_cpu_options: Callable[..., EvalOptions]
) -> None:
    """Position ids made by ``expand`` share memory between elements: the judge's refill of the
    last call's inputs (same memory, new values) once raised on them, and every candidate,
    torch.compile's included, ended as a runtime error (GPT-J's rotary task on the H100)."""
    honest = (
        "import torch\nimport torch.nn as nn\n\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.table = nn.Parameter(torch.randn(66, 16))\n\n"
        "    def forward(self, x, position_ids):\n        return self.table[position_ids] * x\n"
    )
    # hostile: the output kept by the inputs' data pointers; the refill must still reach them
    by_pointer = honest.replace(
        "        return self.table[position_ids] * x\n",
        "        key = (x.data_ptr(), position_ids.data_ptr())\n"
        "        if key not in CACHE:\n            CACHE[key] = self.table[position_ids] * x\n"
        "        return CACHE[key]\n",
    ).replace("import torch.nn as nn\n", "import torch.nn as nn\n\nCACHE = {}\n")
    result, cached = evaluate_many(
        fixture_task("expanded_positions"), [honest, by_pointer], make_cpu_options()
    )
    assert result.status == Status.OK, result.log
    assert result.correct
    assert cached.status != Status.OK and any("results cached across calls" in c for c in cached.cheats), (
        cached.log
    )
