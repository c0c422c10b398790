"""The judge out of the candidate's reach: attacks from inside the candidate's worker.

One attack per file in tests/fixtures/judge/, each saying what it must get. They are judged
with the static checks switched off, so that what holds is the process boundary itself (the
judge in a process that never loads candidate code); the static line is tested apart, at
the end, for the attacks it names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kforge.tools import evaluate as evaluate_module
from kforge.tools.evaluate import EvalOptions, evaluate_many
from kforge.tools.result import Result, Status
from kforge.tools.static_checks import static_cheats
from kforge.tools.task import Task

# end to end (left out of the quick loop, -m 'not slow and not gpu'); the wall-clock attacks need
# a quiet host: .ci/run runs this file alone, after the rest
pytestmark = [pytest.mark.slow, pytest.mark.timing]

# attack -> task it runs against
ATTACKS = {
    "forge_result_file": "scale_relu",
    "forge_result_atexit": "scale_relu",
    "patch_judge_compare": "scale_relu",
    "frames_reference": "scale_relu",
    "corrupt_randn": "scale_relu",
    "precision_after_first": "scale_relu",
    "fallback_suppress": "scale_relu",
    "shrink_shared_file": "scale_relu",
    "patch_judge_clock": "matmul_heavy",
    "lazy_checksum": "matmul_heavy",
    "slow_baseline": "matmul_heavy",
}
# Cheats of the older suite that reached into the worker's process for the task or its state.
REACHING_CHEATS = {
    "calls_reference": "scale_relu",
    "changes_sizes": "scale_relu",
    "ignores_inputs": "matmul_small",
}
TIMED_CALLS = {"matmul_heavy": 40}  # blocks enough for the wall-clock check on a loaded CPU


@pytest.fixture(scope="module")
def results(
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_session_cpu_options: Callable[..., EvalOptions],
) -> Iterator[dict[str, Result]]:
    patch = pytest.MonkeyPatch()
    patch.setattr(evaluate_module, "static_cheats", lambda *args: [])  # the boundary alone
    cases = {name: (task, f"judge/{name}.py") for name, task in ATTACKS.items()}
    cases |= {name: (task, f"cheats/{name}.py") for name, task in REACHING_CHEATS.items()}
    by_task: dict[str, list[str]] = {}
    for name, (task, _) in cases.items():
        by_task.setdefault(task, []).append(name)
    found: dict[str, Result] = {}
    try:
        for task, names in by_task.items():
            # Enough timed calls that the wall-clock check has blocks to compare.
            options = make_session_cpu_options(timing_trials=TIMED_CALLS.get(task, 20))
            sources = [fixture_source(cases[name][1]) for name in names]
            found |= dict(zip(names, evaluate_many(fixture_task(task), sources, options), strict=True))
    finally:
        patch.undo()
    yield found


def _wall_clock_line(result: Result) -> str:
    return next((line for line in result.log.splitlines() if "wall-clock" in line), result.log[-600:])


def _never_ok(result: Result) -> None:
    assert result.status != Status.OK, (result.status, result.cheats, result.log[-600:])
    assert result.speedup_vs_eager is None


def test_a_result_written_by_the_candidate_is_never_read(results: dict[str, Result]) -> None:
    result = results["forge_result_file"]
    assert result.status == Status.RUNTIME_ERROR, (result.status, result.log[-600:])
    assert "candidate worker" in result.log
    _never_ok(results["forge_result_atexit"])


def test_patching_kforge_inside_the_candidate_changes_nothing_the_judge_decides(
    results: dict[str, Result],
) -> None:
    _never_ok(results["patch_judge_compare"])


def test_the_reference_and_the_judges_state_are_out_of_reach(results: dict[str, Result]) -> None:
    for name in ("frames_reference", "calls_reference", "ignores_inputs"):
        _never_ok(results[name])


def test_the_task_cannot_be_shrunk_from_the_candidates_process(
    results: dict[str, Result], loaded_host_only: Callable[[Result], None]
) -> None:
    """changes_sizes shrinks the batch of whatever task module it finds: there is none in its
    process, so it computes the real problem, honestly, on the judge's full-size inputs."""
    result = results["changes_sizes"]
    if result.status != Status.OK:  # two loaded pytest processes on two cores: the one honest miss allowed
        loaded_host_only(result)
    assert result.inputs_mb == pytest.approx(results["frames_reference"].inputs_mb or 0.0)


def test_inputs_and_weights_come_from_the_judge(results: dict[str, Result]) -> None:
    _never_ok(results["corrupt_randn"])


def test_a_candidate_that_shrinks_the_shared_channel_ends_its_evaluation(results: dict[str, Result]) -> None:
    result = results["shrink_shared_file"]
    assert result.status == Status.RUNTIME_ERROR, (result.status, result.log[-600:])
    _never_ok(result)


def test_precision_lowered_after_the_first_call_is_caught(results: dict[str, Result]) -> None:
    result = results["precision_after_first"]
    assert result.status == Status.REJECTED, (result.status, result.log[-600:])
    assert any("precision lowered" in reason for reason in result.cheats), result.cheats


def test_a_forged_clock_is_caught_by_the_judges_own_clock(results: dict[str, Result]) -> None:
    result = results["patch_judge_clock"]
    assert result.status == Status.REJECTED, (result.status, _wall_clock_line(result))
    assert any("timing claims do not add up" in reason for reason in result.cheats), result.cheats


def test_work_moved_out_of_the_timed_call_is_caught(results: dict[str, Result]) -> None:
    """Every output the judge sees is right; the work happens where the timer does not look."""
    result = results["lazy_checksum"]
    assert result.status == Status.REJECTED, (result.status, _wall_clock_line(result))
    assert any("timing claims do not add up" in reason for reason in result.cheats), result.cheats


def test_the_baseline_cannot_be_slowed_from_the_candidates_process(
    results: dict[str, Result], loaded_host_only: Callable[[Result], None]
) -> None:
    result = results["slow_baseline"]
    if result.status != Status.OK:
        loaded_host_only(result)
        return
    assert result.speedup_vs_eager is not None and result.speedup_vs_eager < 3.0, result.speedup_vs_eager


def test_a_suppressed_fallback_runs_the_fallback(results: dict[str, Result]) -> None:
    """Behind the boundary a suppress-fallback is just PyTorch (honest, 1x); the static line
    names it (below), as the issue asks."""
    assert results["fallback_suppress"].status in (Status.OK, Status.REJECTED)


@pytest.mark.parametrize(
    ("name", "phrase"),
    [
        ("judge/fallback_suppress", "contextlib.suppress"),
        ("judge/frames_reference", "introspects the evaluator"),
        ("judge/forge_result_atexit", "exit hooks"),
        ("cheats/calls_reference", "reads sys.modules"),
    ],
)
def test_the_static_line_names_what_it_sees(
    fixture_source: Callable[[str], str], name: str, phrase: str
) -> None:
    reasons = static_cheats(fixture_source(f"{name}.py"), "", "fp32")
    assert any(phrase in reason for reason in reasons), reasons


def test_the_static_line_leaves_kforges_kernel_library_alone() -> None:
    source = "from kforge.tools.gemm.kernels import hgemm\nimport torch\nclass ModelNew(torch.nn.Module):\n    pass\n"
    assert static_cheats(source, "", "fp32") == []
    assert static_cheats(source.replace("tools.gemm.kernels", "tools.compare"), "", "fp32")
    assert static_cheats(source.replace("tools.gemm.kernels", "tools.gemm.search"), "", "fp32")


def test_a_candidate_cannot_forge_where_the_judge_was_stopped(
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_cpu_options: Callable[..., EvalOptions],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(evaluate_module, "static_cheats", lambda *args: [])  # the boundary alone
    options = make_cpu_options(timeout_s=15.0)
    (result,) = evaluate_many(
        fixture_task("scale_relu"), [fixture_source("judge/forge_judge_phase.py")], options
    )
    assert result.status is Status.TIMEOUT, result.log[-600:]
    assert "forged" not in result.log, result.log[-600:]
    assert result.log.endswith("the judge was stopped in its phase: candidate import"), result.log[-600:]
