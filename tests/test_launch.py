"""tools/launch.Tuned: the autotuner chooses once per key; later calls launch the kernel with
that choice directly (its host path was 11 us of a LayerNorm's 84 on an H100), and a key it has
not seen is tuned again. tools/launch.Direct: after Triton's own launch of a specialization,
its compiled launcher is called directly; a new specialization (alignment, an int 1 or a
multiple of 16, the constexprs, the device) or a launch hook goes through Triton again.
Triton's autotuner, kernel and compiled kernel stand in as recorders here (no GPU); the real
ones run in the GPU tests and every template candidate on the device."""

from __future__ import annotations

from typing import Any

import pytest
import torch
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


class Compiled:
    """What ``kernel[grid](...)`` returns: a launcher, its function and metadata."""

    def __init__(self, calls: list[tuple[Any, ...]]) -> None:
        self.function, self.packed_metadata = "function", "packed"
        self.run = lambda *a: calls.append(("direct", *a))


class JitRecorder:
    """A ``@triton.jit`` kernel's launch: recorded, and the compiled kernel returned."""

    def __init__(self, names: list[str], calls: list[tuple[Any, ...]]) -> None:
        self.arg_names, self.calls = names, calls

    def __getitem__(self, grid: Any) -> Any:
        def run(*args: Any, **meta: Any) -> Compiled:
            self.calls.append(("triton", grid, args, meta))
            return Compiled(self.calls)

        return run


@pytest.fixture
def direct(monkeypatch: pytest.MonkeyPatch) -> tuple[launch.Direct, list[tuple[Any, ...]], dict[str, int]]:
    if launch._specialize is None:
        pytest.skip("this Triton has no native_specialize_impl: every launch goes through Triton")
    device = {"index": 0}
    monkeypatch.setattr(launch, "_device", lambda: device["index"])
    monkeypatch.setattr(launch, "_stream", lambda d: 1000 + d)
    calls: list[tuple[Any, ...]] = []
    d = launch.Direct(JitRecorder(["x_ptr", "N", "ROWS_PER"], calls))
    d.enabled = True  # a CPU build of torch has no CUDA device to ask
    return d, calls, device


def test_a_specialization_seen_once_is_launched_through_the_compiled_launcher(direct):
    d, calls, _ = direct
    x = torch.zeros(64)
    d((4,), x, 64, ROWS_PER=2, num_warps=4)
    d((8, 2), x, 64, ROWS_PER=2, num_warps=4)
    assert [c[0] for c in calls] == ["triton", "direct"]
    assert calls[1] == ("direct", 8, 2, 1, 1000, "function", "packed", None, None, None, x, 64, 2)


def test_every_new_specialization_goes_through_triton_first(direct, monkeypatch):
    d, calls, device = direct
    x = torch.zeros(64)

    def kinds(*launches: tuple[tuple[Any, ...], dict[str, Any]]) -> list[str]:
        calls.clear()
        for args, meta in launches:
            d((4,), *args, **meta)
        return [c[0] for c in calls]

    two = {"ROWS_PER": 2}
    assert kinds(((x, 64), two), ((x, 64), two)) == ["triton", "direct"]
    # 4 bytes off 16-byte alignment: Triton drops its divisibility assumption, so must we
    assert kinds(((x[1:], 64), two), ((x[1:], 64), two)) == ["triton", "direct"]
    assert kinds(((x[4:], 64), two)) == ["direct"]  # 16 bytes on: aligned as x
    # an int of 1 is a constant to Triton; 17 and 33 share "not a multiple of 16"
    assert kinds(((x, 1), two), ((x, 17), two), ((x, 33), two)) == ["triton", "triton", "direct"]
    assert kinds(((x, 2**31), two), ((x, 64), {"ROWS_PER": 4})) == ["triton", "triton"]  # i64; constexpr
    assert kinds(((x.double(), 64), two)) == ["triton"]  # another dtype
    device["index"] = 1
    assert kinds(((x, 64), two), ((x, 64), two)) == ["triton", "direct"]
    assert calls[-1][4] == 1001  # that device's stream
    hooks = launch._knobs.runtime.launch_exit_hook
    if hasattr(hooks, "add"):  # Triton's chain of hooks: a profiler's hook sees every launch
        hooks.add(print)
        try:
            assert kinds(((x, 64), two)) == ["triton"]
        finally:
            hooks.remove(print)
    monkeypatch.setattr(launch._knobs.runtime, "launch_enter_hook", lambda *a: None)
    assert kinds(((x, 64), two)) == ["triton"]


def test_a_parameter_left_to_its_default_keeps_the_kernel_on_tritons_path(direct):
    d, calls, _ = direct
    d.names.append("EXTRA")  # a constexpr the call does not pass
    x = torch.zeros(64)
    for _ in range(3):
        d((4,), x, 64, ROWS_PER=2)
    assert [c[0] for c in calls] == ["triton"] * 3


def test_the_autotuner_chooses_once_per_key_then_the_kernel_is_launched_with_its_choice():
    tuned = launch.Tuned(_kernel, [], ["N"], {"ROWS_PER": 2})
    calls: list[tuple[Any, ...]] = []
    choice = triton.Config({"ROWS_PER": 4}, num_warps=8, num_stages=2)
    tuned.tuner = Recorder("autotuner", calls, choice)  # type: ignore[assignment]
    tuned.direct.kernel = Recorder("kernel", calls)
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
    tuned.direct.kernel = Recorder("kernel", calls)
    tuned("a", lambda meta: (100 // meta["ROWS_PER"],), 7, FLAG=False)
    assert calls == [("kernel", (50,), (7,), {"FLAG": False, "ROWS_PER": 2})]


def test_the_host_side_sizes_agree_with_tritons():
    from kforge.tools.launch import cdiv, next_power_of_2

    assert all(cdiv(a, b) == triton.cdiv(a, b) for a in range(300) for b in range(1, 40))
    assert all(next_power_of_2(n) == triton.next_power_of_2(n) for n in range(5000))
