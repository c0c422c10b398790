"""Tasks whose inputs take a tenth of the GPU's memory (KernelBench's current shapes: 7 GB of
input to InstanceNorm, 8 GB to a dilated Conv1d) are evaluated, not lost to the evaluator's own
copies: on 2026-11-27 every candidate of both failed with CUDA out of memory, in the in-place
check's NaN-free copies and beside the judge's cached float64 temporaries.

Run on the device machine: ``pytest -q -m gpu tests/test_memory_gpu.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from kforge.tools.evaluate import EvalOptions, evaluate_many
from kforge.tools.result import Result, Status
from kforge.tools.task import load_task
from kforge.tools.verify import FP64_MEMORY_NOTE

pytestmark = pytest.mark.gpu

TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.InstanceNorm2d(64)

    def forward(self, x):
        return self.norm(x)

def get_inputs():
    return [torch.randn({batch}, 64, 512, 512)]

def get_init_inputs():
    return []
"""

HONEST = """
import torch.nn as nn
import torch.nn.functional as F

class ModelNew(nn.Module):
    def forward(self, x):
        return F.instance_norm(x)
"""

WRITES_ITS_INPUT = """
import torch.nn as nn
import torch.nn.functional as F

class ModelNew(nn.Module):
    def forward(self, x):
        out = F.instance_norm(x)
        x[-1, -1, -1, -1] = 0.0  # one element of a multi-GB input, changed in place
        return out
"""


@pytest.fixture(scope="module")
def big_results(
    tmp_path_factory: pytest.TempPathFactory, make_gpu_options: Callable[..., EvalOptions]
) -> list[Result]:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    per_sample = 64 * 512 * 512 * 4  # bytes of one sample of the input
    batch = max(1, torch.cuda.get_device_properties(0).total_memory // 10 // per_sample)
    path = tmp_path_factory.mktemp("big") / "instance_norm_big.py"
    path.write_text(TASK.format(batch=batch))
    options = make_gpu_options(trials=2, timing_trials=5, compile_baseline=False, timeout_s=600.0)
    return evaluate_many(load_task(Path(path)), [HONEST, WRITES_ITS_INPUT], options)


def test_a_task_whose_input_takes_a_tenth_of_the_gpu_is_evaluated(big_results: list[Result]) -> None:
    honest = big_results[0]
    assert honest.status == Status.OK, f"{honest.log[:1500]}\n...\n{honest.log[-2500:]}"
    assert (
        honest.inputs_mb is not None
        and honest.inputs_mb > 0.09 * torch.cuda.get_device_properties(0).total_memory / 2**20
    )
    print(
        f"inputs {honest.inputs_mb:.0f} MB, judge peak {honest.peak_memory_mb:.0f} MB, flags {honest.flags}"
    )


def test_an_in_place_write_to_a_multi_gb_input_is_still_caught(big_results: list[Result]) -> None:
    writer = big_results[1]
    assert writer.status == Status.REJECTED, writer.log[-3000:]
    assert any("inputs modified in place" in c for c in writer.cheats), writer.cheats


def test_filling_the_gpu_does_not_switch_the_float64_check_off(
    fixture_task: Callable[[str], Any],
    fixture_source: Callable[[str], str],
    make_gpu_options: Callable[..., EvalOptions],
) -> None:
    """A bfloat16 softmax inside the fp32 tolerance is caught only against float64; the candidate
    fills the GPU so that the judge's float64 reference runs out of memory."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    result = evaluate_many(
        fixture_task("softmax_wide"),
        [fixture_source("cheats/precision_bf16_fills_gpu.py")],
        make_gpu_options(compile_baseline=False),
    )[0]
    assert result.status != Status.OK, (result.status, result.log[-2000:])
    assert FP64_MEMORY_NOTE not in result.flags
    print(f"{result.status.value}: {result.cheats} {result.log[-300:]}")
