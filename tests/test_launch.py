"""tools/launch.Tuned: the autotuner chooses once per key; later calls launch the kernel with
that choice directly (its host path was 11 us of a LayerNorm's 84 on an H100), and a key it has
not seen is tuned again. Triton's autotuner and kernel stand in as recorders here (no GPU); the
real ones run in the GPU tests and every template candidate on the device."""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl
from kforge.tools import launch


@triton.jit
def _kernel(x_ptr, N, ROWS_PER: tl.constexpr):
    pass


class Recorder:
    def __init__(self, name: str, calls: list[tuple[Any, ...]], best: triton.Config | None = None) -> None:
        self.name, self.calls = name, calls
        self.best_config = best

    def __getitem__(self, grid: Any) -> Any:
        def run(*args: Any, **meta: Any) -> None:
            self.calls.append((self.name, grid({"ROWS_PER": 4}) if callable(grid) else grid, args, meta))

        return run


def test_the_autotuner_chooses_once_per_key_then_the_kernel_is_launched_with_its_choice():
    tuned = launch.Tuned(_kernel, [], ["N"], {"ROWS_PER": 2})
    calls: list[tuple[Any, ...]] = []
    choice = triton.Config({"ROWS_PER": 4}, num_warps=8, num_stages=2)
    tuned.tuner = Recorder("autotuner", calls, choice)  # type: ignore[assignment]
    tuned.kernel = Recorder("kernel", calls)
    grid = lambda meta: (100 // meta["ROWS_PER"],)  # noqa: E731
    for key in ("a", "a", "b", "a"):
        tuned(key, grid, 1, 2, FLAG=True)
    assert [c[0] for c in calls] == ["autotuner", "kernel", "autotuner", "kernel"]
    name, launched_grid, args, meta = calls[1]
    assert launched_grid == (25,) and args == (1, 2)
    assert meta["FLAG"] is True and meta["ROWS_PER"] == 4
    assert meta["num_warps"] == 8 and meta["num_stages"] == 2


def test_without_a_tuner_the_fixed_configuration_is_launched():
    tuned = launch.Tuned(_kernel, [], ["N"], {"ROWS_PER": 2})
    calls: list[tuple[Any, ...]] = []
    tuned.tuner = None
    tuned.kernel = Recorder("kernel", calls)
    tuned("a", lambda meta: (100 // meta["ROWS_PER"],), 7, FLAG=False)
    assert calls == [("kernel", (50,), (7,), {"FLAG": False, "ROWS_PER": 2})]


def test_the_host_side_sizes_agree_with_tritons():
    from kforge.tools.launch import cdiv, next_power_of_2

    assert all(cdiv(a, b) == triton.cdiv(a, b) for a in range(300) for b in range(1, 40))
    assert all(next_power_of_2(n) == triton.next_power_of_2(n) for n in range(5000))
