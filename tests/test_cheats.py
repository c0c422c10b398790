"""Every cheat that a CPU can show is rejected, with a reason that names it.

One adversarial candidate per cheat lives in tests/fixtures/cheats/. Candidates of the same
task are evaluated in one batch (module-scoped) and each test checks one of them. The
side-stream cheat needs a GPU: tests/test_cheats_gpu.py covers it with all the others.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kforge.tools.evaluate import EvalOptions, evaluate, evaluate_many
from kforge.tools.result import Result, Status
from kforge.tools.task import Task

pytestmark = pytest.mark.slow  # end to end: left out of the quick loop (-m 'not slow and not gpu')

# cheat fixture -> (task, key phrase the rejection reason must contain)
CPU_CHEATS: dict[str, tuple[str, str]] = {
    "cache_across_calls": ("scale_relu", "results cached across calls"),
    "cache_data_ptr": ("scale_relu", "results cached across calls"),
    "cache_in_self": ("scale_relu", "cached"),
    "cache_after_warmup": ("scale_relu", "cached"),
    "timing_aware": ("scale_relu", ""),  # no reason exists for it yet: any rejection will do
    "stale_after_warmup": ("scale_relu", "stale or cached"),
    "inplace_inputs": ("scale_relu", "inputs modified in place"),
    "subclass_output": ("scale_relu", "tensor subclass"),
    "lazy_output": ("scale_relu", "tensor subclass"),
    "patched_event": ("scale_relu", "patches a timer"),
    "patched_timer_dynamic": ("scale_relu", "patched timer"),
    "patched_compare": ("scale_relu", "patched"),
    "calls_reference": ("scale_relu", "reads sys.modules"),
    "sys_modules_through_kernel_library": ("scale_relu", "reads sys.modules"),
    "sys_modules_through_library_globals": ("scale_relu", "reads sys.modules"),
    "clock_through_kernel_library": ("scale_relu", "reaches kforge's own modules"),
    "calls_reference_gc": ("scale_relu", "introspects the evaluator"),
    "try_fallback": ("scale_relu", "try/except"),
    "changes_sizes": ("scale_relu", "reads sys.modules"),
    "background_thread": ("scale_relu", "background thread"),
    "precision_tf32": ("matmul_small", "precision lowered"),
    "ignores_inputs": ("matmul_small", "reads sys.modules"),
    "precision_bf16": ("softmax_wide", "precision lowered: error vs float64"),
}
# Needs CUDA to show at all (see tests/test_cheats_gpu.py).
GPU_ONLY_CHEATS = {"side_stream", "precision_bf16_fills_gpu"}  # the second: tests/test_memory_gpu.py
# Must simply never be ok: a wrong constant; operands cut to bf16's significand behind a tl.dot
# that declares 3xTF32 (which strict fp32 allows); one TF32 pass through kforge's own 3xTF32
# kernel (an import candidates may make) with the remainders zeroed, and the same through its
# flash attention with TF32-rounded operands and its convolution with the weight's split
# patched, and its depthwise template on bf16-cut operands: caught by the comparisons.
NEVER_OK = {
    "constant_output": "matmul_small",
    "precision_behind_tf32x3": "matmul_small",
    "precision_behind_kforge_kernel": "matmul_small",
    "precision_behind_kforge_attention": "attention_small",
    "precision_behind_kforge_conv": "conv_bn_relu",
    "precision_behind_kforge_depthwise": "depthwise_small",
}

# Known gaps in the engine: these tests fail today (strict xfail flips to a failure once fixed).
ENGINE_GAPS: dict[str, str] = {}


def _batch(task_name: str, names: list[str], fixture_task, fixture_source, options: EvalOptions) -> dict:
    sources = [fixture_source(f"cheats/{name}.py") for name in names]
    return dict(zip(names, evaluate_many(fixture_task(task_name), sources, options), strict=True))


@pytest.fixture(scope="module")
def cheat_results(
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_session_cpu_options: Callable[..., EvalOptions],
) -> dict[str, Result]:
    by_task: dict[str, list[str]] = {}
    for name, (task_name, _) in CPU_CHEATS.items():
        by_task.setdefault(task_name, []).append(name)
    for name, task_name in NEVER_OK.items():
        by_task.setdefault(task_name, []).append(name)
    results: dict[str, Result] = {}
    for task_name, names in by_task.items():
        results |= _batch(task_name, names, fixture_task, fixture_source, make_session_cpu_options())
    return results


def _cases() -> list:
    return [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=ENGINE_GAPS[name]))
        if name in ENGINE_GAPS
        else name
        for name in CPU_CHEATS
    ]


@pytest.mark.parametrize("name", _cases())
def test_cheat_is_rejected_with_its_reason(cheat_results: dict[str, Result], name: str) -> None:
    result = cheat_results[name]
    _, phrase = CPU_CHEATS[name]
    assert result.status == Status.REJECTED, f"{name}: {result.status} {result.flags} {result.log[-400:]}"
    assert result.cheats, "a rejection carries its reasons"
    assert any(phrase in reason for reason in result.cheats), result.cheats
    assert result.speedup_vs_eager is None, "a rejected candidate reports no speedup"


@pytest.mark.parametrize("name", sorted(NEVER_OK))
def test_constant_output_is_never_ok(cheat_results: dict[str, Result], name: str) -> None:
    assert cheat_results[name].status in (Status.INCORRECT, Status.REJECTED)


def test_every_cheat_fixture_is_covered(fixtures_dir: Path) -> None:
    on_disk = {p.stem for p in (fixtures_dir / "cheats").glob("*.py")}
    assert on_disk == set(CPU_CHEATS) | GPU_ONLY_CHEATS | set(NEVER_OK)


def test_lower_precision_passes_when_the_class_allows_it(
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_cpu_options: Callable[..., EvalOptions],
) -> None:
    """The same bf16 softmax is fine when the user asked for the bf16 class, and says so."""
    result = evaluate(
        fixture_task("softmax_wide"),
        fixture_source("cheats/precision_bf16.py"),
        make_cpu_options(precision="bf16"),
    )
    assert result.status == Status.OK, (result.cheats, result.log)
    assert result.precision == "bf16"
    assert result.fp64_rel_err is not None and result.fp64_rel_err > 1e-4


@pytest.mark.parametrize("timed_runs", [4, 5])
def test_stale_results_are_caught_whatever_the_number_of_timed_runs(
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_cpu_options: Callable[..., EvalOptions],
    timed_runs: int,
) -> None:
    """The timed inputs alternate between two sets that neither verification nor the warm-up
    saw, so a result kept from verification or warm-up is wrong on the last timed call, even
    or odd (stale_after_warmup passed with 4 runs when the warm-up used one of the sets)."""
    names = ["cache_after_warmup", "timing_aware", "stale_after_warmup"]
    sources = [fixture_source(f"cheats/{name}.py") for name in names]
    results = evaluate_many(fixture_task("scale_relu"), sources, make_cpu_options(timing_trials=timed_runs))
    for name, result in zip(names, results, strict=True):
        assert result.status == Status.REJECTED, (name, timed_runs, result.status, result.log[-300:])
        assert any("stale or cached" in reason for reason in result.cheats), result.cheats


def test_timing_lean_on_big_inputs_still_catches_caches_and_in_place_writes(
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_cpu_options: Callable[..., EvalOptions],
) -> None:
    """Inputs over a GiB are timed lean: two copies of them in each process (the inputs and a
    spare, swapped in place), the warm-up on the first timed set, and two trials of five. With the threshold at 0,
    the candidates that keep results where lean timing changed things, or change their inputs, are
    still rejected for it, and an honest one is still ok."""
    # a cache keyed on data pointers (the swap keeps them), one made in the warm-up (which moved
    # to the first timed set), and an in-place writer (a swap would carry its writes along)
    names = ["cache_data_ptr", "stale_after_warmup", "inplace_inputs"]
    sources = [fixture_source(f"cheats/{name}.py") for name in names] + [
        fixture_source("candidates/scale_relu_torch.py")
    ]
    results = evaluate_many(fixture_task("scale_relu"), sources, make_cpu_options(lean_bytes=0))
    for name, result in zip(names, results, strict=False):
        assert result.status == Status.REJECTED, (name, result.status, result.log[-400:])
        assert any(CPU_CHEATS[name][1] in reason for reason in result.cheats), (name, result.cheats)
    assert results[-1].status == Status.OK, results[-1].log[-600:]
    assert "lean" in results[-1].log, results[-1].log[-600:]
    assert results[-1].trials == 2 and "0 MB: 2 trials of 5" in " ".join(results[-1].flags), results[-1].flags
