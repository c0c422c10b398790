"""What an evaluation holds in memory, and what a timed eager call beside a candidate sees.

The bound checked, for the judge's worker (the candidate runs in a process of its own, whose
allocations it reports as ``candidate_memory_mb``): peak <= inputs + outputs + 2 spare copies
of them (the timed calls' two input sets) + a float64 copy of one input set (the answer the
timed outputs are checked against), plus a fixed allowance for the comparison and
fingerprint slices. On the CPU the peak is the worker's resident memory, so this is the real
figure, not a count the evaluator keeps of itself."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from kforge.tools.evaluate import EvalOptions, evaluate, measure_baseline
from kforge.tools.fingerprint import Fingerprinter
from kforge.tools.result import Status
from kforge.tools.task import Task

pytestmark = pytest.mark.slow  # end to end: left out of the quick loop (-m 'not slow and not gpu')

# Comparison and fingerprint temporaries (8 MB slices), Python's own growth and library pages
# touched for the first time: 372-374 MB measured here against a bound of 416, 392 on CI's
# machine (its malloc arenas and libraries differ); 356 here since the checksum's weights are
# int8 (2026-11-28; three float64 probes held measured 505 on CI). An extra copy of the inputs
# (64 MB) still fails.
SLICES_MB = 96


def test_evaluation_peak_memory_stays_within_the_bound(
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_cpu_options: Callable[..., EvalOptions],
) -> None:
    result = evaluate(
        fixture_task("large_scale"),
        fixture_source("candidates/large_scale_torch.py"),
        make_cpu_options(timeout_s=300.0),
    )
    assert result.status == Status.OK, result.log
    assert result.inputs_mb == pytest.approx(64) and result.outputs_mb == pytest.approx(1 / 64)
    assert result.candidate_memory_mb is not None
    assert result.peak_memory_mb is not None
    held = result.inputs_mb + result.outputs_mb
    bound = held + 2 * held + 2 * result.inputs_mb + SLICES_MB
    assert result.peak_memory_mb <= bound, (result.peak_memory_mb, bound)
    assert Status(type(result).from_json(result.to_json()).status) == Status.OK


def test_old_results_without_memory_figures_load() -> None:
    from kforge.tools.result import Result

    old = {"status": "ok", "precision": "fp32", "device": "cuda", "candidate_ms": 1.0}
    result = Result.from_json(old)
    assert result.peak_memory_mb is None and result.inputs_mb is None


def test_fingerprints_tell_changed_bits_apart() -> None:
    prints = Fingerprinter(torch.device("cpu"))
    x = torch.rand(5 * 2**20 + 3)
    assert prints.of([x, 3]) == prints.of([x.clone(), 3])
    y = x.clone()
    y[-1] = torch.nextafter(y[-1], torch.tensor(2.0))  # one bit of the last element
    assert prints.of(x) != prints.of(y)
    swapped = x.clone()
    swapped[0], swapped[1] = x[1], x[0]
    assert prints.of(x) != prints.of(swapped)
    assert prints.of(x.view(-1, 1)) != prints.of(x)  # the shape is part of it
    assert prints.of(torch.tensor([True, False])) != prints.of(torch.tensor([False, True]))


# On the CPU the judge's wall-clock check can reject this honest candidate when the host is
# loaded (2026-11-28, CI-like run: 1.28 and 0.85 ms a call unexplained against 0.5 allowed, load
# 3.2 on 2 cores, the retry included); what this test checks is the state eager records
@pytest.mark.flaky(reruns=2)
def test_timed_eager_beside_the_candidate_sees_what_the_baseline_sees(
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_cpu_options: Callable[..., EvalOptions],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No mode, hook or profiler is active while eager is timed in the candidate's worker:
    the reference's forward records the same state there as in the baseline step."""
    task = fixture_task("state_probe")
    states = {}
    for name in ("baseline", "candidate"):
        log = tmp_path / f"{name}.jsonl"
        monkeypatch.setenv("KFORGE_STATE_PROBE", str(log))
        if name == "baseline":
            result = measure_baseline(task, make_cpu_options(timing_trials=10, extra_writable=(tmp_path,)))
        else:
            source = fixture_source("candidates/state_probe_torch.py")
            result = evaluate(task, source, make_cpu_options(timing_trials=10, extra_writable=(tmp_path,)))
        assert result.status == Status.OK, result.log
        states[name] = [json.loads(line) for line in log.read_text().splitlines()]
    assert states["candidate"], "the probe recorded nothing while eager was timed"
    expected = {
        "torch_function_modes": 0,
        "dispatch_modes": [],
        "trace": "None",
        "profile": "None",
        "grad": False,
        "anomaly": False,
        "profiler": False,
        "default_device": "cpu",
    }
    # The baseline's last call is the roofline's, under the flop counter; the candidate's
    # worker is handed that roofline and does not count again.
    assert states["baseline"][-1]["dispatch_modes"] == ["_FlopCounterMode"]
    assert all(state == expected for state in states["baseline"][:-1]), states["baseline"]
    assert all(state == expected for state in states["candidate"]), states["candidate"]
