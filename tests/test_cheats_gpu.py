"""On a CUDA GPU: every cheat class rejected (the side-stream and thread ones included), an
illegal memory access ending its worker only, the example candidates ok with real timings,
and Nsight Compute / compute-sanitizer figures when the tools are present.

Run on the device machine: ``pytest -q -m gpu``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable

import pytest
from kforge.examples import ROOT as EXAMPLES
from kforge.examples import catalog_pairs
from kforge.tools.evaluate import EvalOptions, evaluate, evaluate_many
from kforge.tools.result import Result, Status
from kforge.tools.task import Task, load_task
from kforge.tools.timing import CUDA_LABEL

pytestmark = pytest.mark.gpu

# cheat fixture -> (task, key phrases: the rejection reasons must contain one of them)
GPU_CHEATS: dict[str, tuple[str, tuple[str, ...]]] = {
    "cache_across_calls": ("scale_relu", ("results cached across calls",)),
    "cache_data_ptr": ("scale_relu", ("results cached across calls",)),
    "cache_in_self": ("scale_relu", ("cached",)),
    "cache_after_warmup": ("scale_relu", ("cached",)),
    "timing_aware": ("scale_relu", ("",)),
    "stale_after_warmup": ("scale_relu", ("stale or cached",)),
    "inplace_inputs": ("scale_relu", ("inputs modified in place",)),
    "subclass_output": ("scale_relu", ("tensor subclass",)),
    "lazy_output": ("scale_relu", ("tensor subclass", "no storage")),
    "patched_event": ("scale_relu", ("patches a timer",)),
    "patched_timer_dynamic": ("scale_relu", ("patched timer",)),
    "patched_compare": ("scale_relu", ("patched",)),
    "calls_reference": ("scale_relu", ("reads sys.modules",)),
    "calls_reference_gc": ("scale_relu", ("introspects the evaluator",)),
    "try_fallback": ("scale_relu", ("try/except",)),
    "changes_sizes": ("scale_relu", ("reads sys.modules",)),
    "background_thread": ("scale_relu_big", ("background thread", "work the timer misses")),
    "side_stream": ("scale_relu_big", ("side stream", "work the timer misses")),
    "precision_tf32": ("matmul_small", ("precision lowered",)),
    "ignores_inputs": ("matmul_small", ("reads sys.modules",)),
    "precision_bf16": ("softmax_wide", ("precision lowered",)),
}
# Known engine gaps (strict xfail, flips to a failure once fixed); none today.
ENGINE_GAPS: dict[str, str] = {}


@pytest.fixture(scope="module")
def gpu_cheat_results(
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_gpu_options: Callable[..., EvalOptions],
) -> dict[str, Result]:
    by_task: dict[str, list[str]] = {}
    for name, (task_name, _) in GPU_CHEATS.items():
        by_task.setdefault(task_name, []).append(name)
    results: dict[str, Result] = {}
    for task_name, names in by_task.items():
        sources = [fixture_source(f"cheats/{n}.py") for n in names]
        found = evaluate_many(fixture_task(task_name), sources, make_gpu_options(compile_baseline=False))
        results |= dict(zip(names, found, strict=True))
    return results


def _cases() -> list:
    return [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=ENGINE_GAPS[n]))
        if n in ENGINE_GAPS
        else n
        for n in GPU_CHEATS
    ]


@pytest.mark.parametrize("name", _cases())
def test_cheat_is_rejected_on_cuda(gpu_cheat_results: dict[str, Result], name: str) -> None:
    result = gpu_cheat_results[name]
    _, phrases = GPU_CHEATS[name]
    assert result.status == Status.REJECTED, f"{name}: {result.status} {result.flags} {result.log[-600:]}"
    assert any(p in reason for reason in result.cheats for p in phrases), result.cheats


# Candidates that run kforge's own kernels (an import candidates may make) with a precision
# lowered behind them: remainders zeroed, TF32-rounded attention operands, a convolution's weight
# split patched. On the CPU the interpreter runs them (tests/test_cheats.py); here the compiled
# kernels do, with their GPU rounding. Never ok.
PRECISION_BEHIND_KERNELS = {
    "precision_behind_tf32x3": "matmul_small",
    "precision_behind_kforge_kernel": "matmul_small",
    "precision_behind_kforge_attention": "attention_small",
    "precision_behind_kforge_conv": "conv_bn_relu",
}


@pytest.fixture(scope="module")
def behind_kernels(
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_gpu_options: Callable[..., EvalOptions],
) -> dict[str, Result]:
    results: dict[str, Result] = {}
    for name, task_name in PRECISION_BEHIND_KERNELS.items():
        (found,) = evaluate_many(
            fixture_task(task_name),
            [fixture_source(f"cheats/{name}.py")],
            make_gpu_options(compile_baseline=False),
        )
        results[name] = found
    return results


@pytest.mark.parametrize("name", sorted(PRECISION_BEHIND_KERNELS))
def test_precision_lowered_behind_kforges_own_kernels_is_never_ok_on_cuda(
    behind_kernels: dict[str, Result], name: str
) -> None:
    result = behind_kernels[name]
    print(
        f"{name}: {result.status.value} fp64 err {result.fp64_rel_err} {result.cheats or result.log[-200:]}"
    )
    assert result.status != Status.OK, f"{name}: ok on CUDA, fp64 err {result.fp64_rel_err}"


# Attacks from inside the candidate's worker that need a GPU (tests/test_judge.py has the rest).
GPU_ATTACKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "forged_events_gpu": ("scale_relu_big", ("timing claims do not add up", "speed of light")),
    "lazy_checksum_gpu": ("matmul_gpu", ("timing claims do not add up",)),
}


@pytest.mark.parametrize("name", sorted(GPU_ATTACKS))
def test_attack_from_inside_the_worker_is_rejected_on_cuda(
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_gpu_options: Callable[..., EvalOptions],
    name: str,
) -> None:
    task_name, phrases = GPU_ATTACKS[name]
    result = evaluate(
        fixture_task(task_name), fixture_source(f"judge/{name}.py"), make_gpu_options(compile_baseline=False)
    )
    assert result.status == Status.REJECTED, f"{name}: {result.status} {result.cheats} {result.log[-1500:]}"
    assert any(p in reason for reason in result.cheats for p in phrases), result.cheats


@pytest.fixture(scope="module")
def crash_batch(
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_gpu_options: Callable[..., EvalOptions],
) -> dict[str, Result]:
    names = ["illegal_memory_access", "scale_relu_triton", "segfault", "not_written", "scale_relu_torch"]
    sources = [fixture_source(f"candidates/{n}.py") for n in names]
    results = evaluate_many(fixture_task("scale_relu"), sources, make_gpu_options(compile_baseline=False))
    return dict(zip(names, results, strict=True))


def test_illegal_memory_access_ends_its_worker_only(crash_batch: dict[str, Result]) -> None:
    result = crash_batch["illegal_memory_access"]
    assert result.status == Status.RUNTIME_ERROR, result.log
    assert "illegal memory access" in result.log.lower() or "SIGSEGV" in result.log, result.log[-2000:]
    assert crash_batch["scale_relu_triton"].status == Status.OK, crash_batch["scale_relu_triton"].log


def test_segfault_on_a_gpu_worker(crash_batch: dict[str, Result]) -> None:
    assert crash_batch["segfault"].status == Status.RUNTIME_ERROR
    assert "SIGSEGV" in crash_batch["segfault"].log
    assert crash_batch["scale_relu_torch"].status == Status.OK


def test_unwritten_output_reads_the_poison(crash_batch: dict[str, Result]) -> None:
    result = crash_batch["not_written"]
    assert result.status == Status.INCORRECT
    assert "NaN/Inf values" in result.log


def test_correct_candidates_have_cuda_timings(crash_batch: dict[str, Result]) -> None:
    for name in ("scale_relu_triton", "scale_relu_torch"):
        result = crash_batch[name]
        assert result.timing_label == CUDA_LABEL
        assert result.candidate is not None and result.candidate.median_ms > 0
        assert result.eager is not None and result.eager.median_ms > 0
        assert result.roofline is not None and result.roofline.floor_ms is not None


def example_pairs() -> list[tuple[str, str]]:
    """(task file, candidate file) under examples/, from its catalog."""
    return [(str(t.relative_to(EXAMPLES)), str(c.relative_to(EXAMPLES))) for t, c in catalog_pairs()]


@pytest.fixture(scope="module")
def example_results(make_gpu_options: Callable[..., EvalOptions]) -> Callable[[str, str], Result]:
    """Results of the example candidates, evaluated one task at a time on first request, so
    ``-k`` on a task name evaluates only that task (CUDA builds and torch.compile are slow)."""
    by_task: dict[str, list[str]] = {}
    for task_file, cand_file in example_pairs():
        by_task.setdefault(task_file, []).append(cand_file)
    done: dict[tuple[str, str], Result] = {}

    def get(task_file: str, cand_file: str) -> Result:
        if (task_file, cand_file) not in done:
            cands = by_task[task_file]
            sources = [(EXAMPLES / c).read_text() for c in cands]
            found = evaluate_many(
                load_task(EXAMPLES / task_file), sources, make_gpu_options(compile_workers=4)
            )
            done.update({(task_file, c): r for c, r in zip(cands, found, strict=True)})
        return done[(task_file, cand_file)]

    return get


# diag(a) @ b: the reference multiplies by an N x N matrix, the candidates scale rows (O(N^2))
SHORTCUT_TASKS = {"tasks/diag_matmul.py"}


@pytest.mark.parametrize(("task_file", "cand_file"), example_pairs())
def test_example_candidate_is_ok_with_real_timings(
    example_results: Callable[[str, str], Result], task_file: str, cand_file: str
) -> None:
    result = example_results(task_file, cand_file)
    assert result.status == Status.OK, f"{cand_file}: {result.status} {result.cheats} {result.log[-1500:]}"
    assert result.timing_label == CUDA_LABEL
    assert result.candidate is not None and result.candidate.median_ms > 0
    assert result.eager is not None and result.eager.median_ms > 0
    assert result.compiled is not None and result.compiled.median_ms > 0
    assert result.roofline is not None and result.roofline.floor_ms is not None
    fraction = result.roofline_fraction
    assert fraction is not None and fraction > 0
    shortcut = [f for f in result.flags if f.startswith("faster than the roofline floor")]
    if task_file in SHORTCUT_TASKS:  # the reference's FLOPs are not the task's: fraction over 1, flagged
        assert fraction > 1 and shortcut, (fraction, result.flags)
    else:
        assert fraction <= 1.5 and (fraction <= 1) == (not shortcut), (fraction, result.flags)


@pytest.mark.skipif(shutil.which("ncu") is None, reason="ncu not on PATH")
def test_ncu_metrics(
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_gpu_options: Callable[..., EvalOptions],
) -> None:
    result = evaluate(
        fixture_task("scale_relu_big"),
        fixture_source("candidates/scale_relu_triton.py"),
        make_gpu_options(compile_baseline=False, ncu=True),
    )
    assert result.status == Status.OK, result.log
    assert result.ncu is not None and "error" not in result.ncu, result.ncu
    assert result.ncu["kernels"] >= 1
    assert result.ncu["gpu_time_ns"] > 0
    assert 0 < result.ncu["dram_throughput_pct"] <= 100


@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="compute-sanitizer not on PATH")
def test_sanitizer_clean_and_dirty(
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_gpu_options: Callable[..., EvalOptions],
) -> None:
    result = evaluate(
        fixture_task("scale_relu"),
        fixture_source("candidates/scale_relu_triton.py"),
        make_gpu_options(compile_baseline=False, sanitize=True),
    )
    assert result.status == Status.OK, result.log
    assert result.sanitizer is not None and "error" not in result.sanitizer, result.sanitizer
    assert result.sanitizer["memcheck"]["completed"]
    assert result.sanitizer["memcheck"]["errors"] == 0
    assert result.sanitizer["racecheck"]["completed"]
