"""A quiet host for timing (tools/quiet.py): which cores are kept for timing, the workers
kforge starts stay off them, the timing thread alone moves onto its core, and a busy host
is told apart from a quiet one."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest
from kforge.tools import quiet
from kforge.tools.evaluate import EvalOptions, evaluate
from kforge.tools.result import Status
from kforge.tools.task import Task

two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")

# Correct for scale_relu only where the worker runs off core 1, or on core 1 alone: the
# verification (background cores) and the timed calls (the reserved core) both pass.
CONFINED = """
import os
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        cores = os.sched_getaffinity(0)
        if 1 in cores and len(cores) > 1:
            raise RuntimeError(f"ran on cores {sorted(cores)}: neither the background nor the reserved core")
        return torch.relu(x * self.weight + self.bias)
"""


def test_reserved_cores_follow_the_setting_or_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(quiet.ENV, raising=False)
    assert quiet.reserved_cpus(gpus=1, allowed=list(range(16))) == []  # off unless asked for
    monkeypatch.setenv(quiet.ENV, "auto")
    assert quiet.reserved_cpus(gpus=1, allowed=list(range(16))) == [15]
    assert quiet.reserved_cpus(gpus=2, allowed=list(range(8))) == [6, 7]
    assert quiet.reserved_cpus(gpus=8, allowed=list(range(16))) == []  # too few cores to spare
    assert quiet.reserved_cpus(gpus=1, allowed=[0, 1]) == []
    monkeypatch.setenv(quiet.ENV, "off")
    assert quiet.reserved_cpus(gpus=1, allowed=list(range(16))) == []
    monkeypatch.setenv(quiet.ENV, "3,7")
    assert quiet.reserved_cpus() == [3, 7]
    env = quiet.timing_env("cuda", "1")
    assert env == {quiet.ENV: "3,7", quiet.MINE: "7"}  # GPU 1 times on the second reserved core
    monkeypatch.setenv(quiet.ENV, "three")
    with pytest.raises(SystemExit, match="give core numbers like 14,15, auto or off"):
        quiet.reserved_cpus()


def test_cpu_timing_is_left_alone_unless_cores_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(quiet.ENV, "auto")
    assert quiet.timing_env("cpu", "") == {quiet.ENV: "off"}
    assert quiet.background_cpus({quiet.ENV: "off"}) is None


@two_cores
def test_only_the_timing_thread_moves_to_the_reserved_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(quiet.MINE, "1")
    before = os.sched_getaffinity(0)
    with quiet.quiet_timing() as load:
        assert os.sched_getaffinity(0) == {1}
        time.sleep(0.05)
    assert os.sched_getaffinity(0) == before
    assert load.cpu == 1 and load.seconds >= 0.05
    assert "reserved cpu 1" in load.line()


def test_a_preempted_timing_thread_means_a_busy_host() -> None:
    assert quiet.HostLoad(seconds=2.0, involuntary_switches=400).busy
    assert not quiet.HostLoad(seconds=2.0, involuntary_switches=12).busy
    assert not quiet.HostLoad(seconds=0.01, involuntary_switches=8).busy


@two_cores
def test_workers_run_off_the_reserved_core_and_time_on_it(
    monkeypatch: pytest.MonkeyPatch,
    fixture_task: Callable[[str], Task],
    make_cpu_options: Callable[..., EvalOptions],
) -> None:
    monkeypatch.setenv(quiet.ENV, "1")
    monkeypatch.setenv("KFORGE_SPARE_WORKER", "0")
    result = evaluate(fixture_task("scale_relu"), CONFINED, make_cpu_options(compile_baseline=False))
    assert result.status == Status.OK, result.log
    assert "timing host: reserved cpu 1;" in result.log
    monkeypatch.setenv(quiet.ENV, "off")  # without the reservation the worker has both cores
    result = evaluate(fixture_task("scale_relu"), CONFINED, make_cpu_options(compile_baseline=False))
    assert result.status == Status.RUNTIME_ERROR
    assert "ran on cores [0, 1]" in result.log


def test_without_a_reservation_both_workers_of_a_gpu_time_on_one_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The judge's and the candidate's workers take turns timing: on the same core, the
    host-bound part of a call costs both the same, and no core is kept from other work."""
    monkeypatch.setenv(quiet.ENV, "off")
    cpus = sorted(os.sched_getaffinity(0))
    env = quiet.timing_env("cuda", "0")
    assert env == {quiet.ENV: "off", quiet.MINE: str(cpus[-1])}
    assert quiet.timing_env("cuda", "0") == env  # the same core for both workers of an evaluation
    assert quiet.background_cpus(env) is None
