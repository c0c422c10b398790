"""Timing one callable: CUDA events with a device-wide synchronize and L2 flushed between
trials on the GPU; the wall clock on the CPU (and labelled so).

The timer functions are bound when this module is imported, before any candidate code
runs, so a candidate that patches ``torch.cuda.Event`` or ``time.perf_counter`` later
does not change what we measure (the guards report it too).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any, Protocol

import torch

from .result import Timing
from .trees import refill, release

_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_synchronize = torch.cuda.synchronize
_elapsed_time = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record
_stream_synchronize = torch.cuda.Stream.synchronize
_current_stream = torch.cuda.current_stream

CUDA_LABEL = "cuda events, device-wide sync, L2 flushed"
CPU_LABEL = "cpu wall clock (not GPU time)"
BLOCK = 5  # timed calls in a row per callable and round (Timer.time_many)
MIN_ROUNDS = 4  # rounds before the time budget may end the timing (claims.MIN_BLOCKS)
PLAIN_CHECK = "KFORGE_PLAIN_CHECK"  # "1": the worker also times eager and torch.compile in plain loops


class Slot(Protocol):
    """Something :meth:`Timer.time_many` times: warmed up, then run in blocks."""

    last_output: Any

    def warm(self, calls: int) -> None: ...

    def before_block(self) -> None: ...  # untimed, just before each block

    def block(self, size: int) -> list[float]: ...

    def after_block(self) -> None: ...  # untimed, after each block and after the warm-up


class LocalSlot:
    """A callable of this process, timed by ``timer`` (``before`` and ``after`` as in
    :meth:`Timer.run_block`). With ``release``, the GPU memory its calls left cached goes back
    to the driver after each block: the candidate's process, timed next on the same GPU,
    cannot allocate what this one holds cached (KernelBench's 7-8 GB inputs and outputs)."""

    def __init__(
        self,
        timer: Timer,
        fn: Callable[[], Any],
        before: Callable[[], None] | None = None,
        after: Callable[[Any], Any] | None = None,
        release: bool = False,
    ) -> None:
        self.timer, self.fn, self.before, self.after = timer, fn, before, after
        self.release = release
        self.last_output: Any = None

    def warm(self, calls: int) -> None:
        for _ in range(calls):
            self.fn()

    def before_block(self) -> None:
        pass

    def block(self, size: int) -> list[float]:
        times = self.timer.run_block(self.fn, self.before, size, self.after)
        self.last_output, self.timer.last_output = self.timer.last_output, None
        return times

    def after_block(self) -> None:
        if self.release:
            release(self.timer.device)


class Timer:
    """Times callables on one device with the same settings for every one of them."""

    def __init__(self, device: torch.device, trials: int, max_seconds: float = 2.0, warmup: int = 3) -> None:
        self.device = device
        self.trials = trials
        self.max_seconds = max_seconds
        self.warmup = warmup
        self._flush: torch.Tensor | None = None
        self.last_output: Any = None
        self.walls: dict[str, list[float]] = {}  # wall ms of each block, by slot (time_many)
        self.samples: dict[str, list[float]] = {}  # each timed call's ms, by slot (time_many)
        if device.type == "cuda":
            l2 = torch.cuda.get_device_properties(device).L2_cache_size
            self._flush = torch.empty(max(2 * l2, 64 * 2**20), dtype=torch.int8, device=device)

    @property
    def label(self) -> str:
        return CUDA_LABEL if self.device.type == "cuda" else CPU_LABEL

    def time(self, fn: Callable[[], Any], before_each: Callable[[], None] | None = None) -> Timing:
        """Median and spread of ``fn``'s time. ``before_each`` runs outside the timed region
        before every run (the evaluator changes the input values there); the output of the
        last run is kept in ``last_output``."""
        kept: list[Any] = []
        timing = self.time_many(
            {"fn": LocalSlot(self, fn, before_each)}, on_last=lambda _, out: kept.append(out)
        )
        self.last_output = kept[-1] if kept else None
        return timing["fn"]

    def time_many(
        self, slots: dict[str, Slot], *, on_last: Callable[[str, Any], None] | None = None
    ) -> dict[str, Timing]:
        """Several callables timed interleaved, in blocks: round r runs each a few times in a
        row (``block_size``), in the given order rotated by r. Whatever drifts while they are
        timed (host load from other workers' compiles, clocks) then falls on all of them alike;
        timed one after another, a launch-bound eager forward measured 1.8 to 2.8 ms beside
        different candidates in one batch. Blocks, not single calls, and each block opened by
        an untimed call: a launch-bound forward dispatches faster on the host when it ran just
        before (its code and data warm in the CPU's caches), as it always did in a plain loop.
        Single calls interleaved timed EfficientNetB2's eager forward 6-10% over a plain loop on
        an H100's host; blocks of five 2.5% (docs/log/2026-11-23-timing-vcpus-and-blocks.md).
        A slot is a local callable or a candidate in another process (:mod:`.remote`); each
        block's wall time, taken here, goes to ``walls`` (the judge's check of the claims).
        ``on_last(name, output)`` gets each slot's output in the final round."""
        names = list(slots)
        for name in names:
            slots[name].warm(self.warmup)
            slots[name].after_block()
        self.sync()
        samples: dict[str, list[float]] = {name: [] for name in names}
        self.walls = {name: [] for name in names}
        self.samples = samples
        block = self.block_size()
        budget_end = _perf_counter() + self.max_seconds * len(names)
        rounds = 0
        while True:
            done = (rounds + 1) * block
            # Past the time budget, stop once 10 calls and MIN_ROUNDS blocks a slot are done: the
            # judge's wall-clock check needs blocks, and slow blocks must not cut it short.
            enough = done >= 10 and rounds + 1 >= MIN_ROUNDS
            last = done >= self.trials or (enough and _perf_counter() >= budget_end)
            for i in range(len(names)):
                name = names[(rounds + i) % len(names)]
                slots[name].before_block()
                start = _perf_counter()
                samples[name] += slots[name].block(block)
                self.walls[name].append((_perf_counter() - start) * 1e3)
                if last and on_last is not None:
                    on_last(name, slots[name].last_output)
                slots[name].last_output = None  # one output alive at a time (see _one)
                slots[name].after_block()
            rounds += 1
            if last:
                return {name: summarize(samples[name]) for name in names}

    def block_size(self) -> int:
        """Timed calls in a row per callable and round: five, with four rounds at least."""
        return max(1, min(BLOCK, self.trials // 4))

    def run_block(
        self,
        fn: Callable[[], Any],
        before: Callable[[], None] | None,
        size: int,
        after: Callable[[Any], Any] | None = None,
    ) -> list[float]:
        """An untimed opening call, then ``size`` timed calls; ``before`` and ``after(output)``
        run outside the timed region around each timed call."""
        self.last_output = None  # gone before the opening call too (see _one)
        if size > 1:  # the untimed opening call
            fn()
            self.sync()
        times = []
        for _ in range(size):
            if before is not None:  # its GPU work done before the flush: every callable's
                before()  # timed call starts behind the flush alone, as in a plain loop
                self.sync()
            times.append(self._one(fn))
            if after is not None:
                after(self.last_output)
                self.sync()
        return times

    def plain_loops(self, entries: dict[str, Callable[[], Any]]) -> str:
        """Each callable alone in a plain loop of ``trials`` timed calls, median in ms:
        bench_fidelity.py's reference for the interleaved rounds, taken in the same process
        (``KFORGE_PLAIN_CHECK=1``), so that the host's speed, which differs between its
        processes, is the same on both sides."""
        walls, samples = self.walls, self.samples  # the rounds' figures, which the judge checks
        try:
            return " ".join(f"{name} {self.time(fn).median_ms:.5f}" for name, fn in entries.items())
        finally:
            self.walls, self.samples = walls, samples

    def _one(self, fn: Callable[[], Any]) -> float:
        # The last call's output goes before this call makes its own: with a 5-8 GB output
        # (KernelBench's current inputs), two held side by side in the judge and the worker
        # each ran an 80 GB GPU out of memory.
        self.last_output = None
        if self._flush is None:
            start = _perf_counter()
            self.last_output = fn()
            return (_perf_counter() - start) * 1e3
        self._flush.zero_()  # evict the inputs from L2: every trial starts cold
        start_ev, end_ev = _Event(enable_timing=True), _Event(enable_timing=True)
        _record(start_ev)
        self.last_output = fn()
        _record(end_ev)
        _synchronize()  # device-wide: all streams, not only the current one
        return float(_elapsed_time(start_ev, end_ev))

    def escaped_ms(self, fn: Callable[[], Any], repeats: int = 5) -> float:
        """Median time the device stays busy after the caller's stream has finished ``fn``'s
        work: about the cost of a synchronize (microseconds) for an honest candidate, the
        length of the hidden work for one that runs on a side stream the timer misses.
        Host time (launch overhead, Python) is on both sides of the difference, so a fast
        kernel with a slow launcher does not look like a cheat."""
        if self._flush is None:
            return 0.0
        samples = []
        for _ in range(repeats):
            self._flush.zero_()
            _synchronize()
            fn()
            _stream_synchronize(_current_stream())
            stream_done = _perf_counter()
            _synchronize()
            samples.append((_perf_counter() - stream_done) * 1e3)
        return statistics.median(samples)

    def sync(self) -> None:
        if self.device.type == "cuda":
            _synchronize()


def summarize(samples: list[float]) -> Timing:
    ordered = sorted(samples)
    n = len(ordered)
    q1, q3 = ordered[n // 4], ordered[(3 * n) // 4 if n > 1 else 0]
    return Timing(
        median_ms=statistics.median(ordered),
        min_ms=ordered[0],
        max_ms=ordered[-1],
        iqr_ms=q3 - q1,
        trials=n,
    )


class InputSwitcher:
    """Alternates the values held by the input tensors between two sets that verification
    never used, outside the timed region. Every timed call's output is checked against the
    answer for its set (:mod:`.claims`), so a candidate that returns a result it computed
    earlier (during verification, warm-up or the previous timed call) fails on some call.

    Two ways to hold the sets. By default both are kept apart from the inputs and copied into
    them before each call; the warm-up runs on the last verified values. With ``swap`` (inputs
    over a GiB, which neither side changes in place) the inputs take the first set's values at
    once and the second waits in ``spare``; each switch swaps the two in place, slice by slice.
    Two copies of the inputs instead of three, in each of two processes on one GPU: with
    KernelBench's 8 GB inputs the third ran an H100 out of memory."""

    def __init__(self, inputs: list[Any], first: list[Any], second: list[Any], swap: bool = False) -> None:
        self.inputs = inputs
        self.swap = swap
        if swap:
            _load(inputs, first)
            self.sets: list[list[Any]] = []  # the caller's ``first`` can go: its values are in the inputs
            self.spare = second
            self.turn = 0
        else:
            self.sets = [first, second]
            self.spare = []
            self.turn = 1  # the first call loads ``first``

    def __call__(self) -> None:
        self.turn ^= 1
        if self.swap:
            for i, (live, other) in enumerate(zip(self.inputs, self.spare, strict=True)):
                if isinstance(live, torch.Tensor):
                    self.inputs[i], self.spare[i] = _swap(live, other)
        else:
            _load(self.inputs, self.sets[self.turn])

    def values(self, turn: int) -> list[Any]:
        """The tensors that hold set ``turn``'s values now."""
        if not self.swap:
            return self.sets[turn]
        return self.inputs if turn == self.turn else self.spare

    def keep(self, turn: int) -> list[Any]:
        """Set ``turn``'s values, the other set freed: what the judge's recheck of the last
        timed output needs once the rounds are over. With 8 GB inputs that answer ran the judge
        out of memory beside both sets and the output. The switcher switches no more."""
        if not self.swap:
            self.sets = [self.sets[turn] if i == turn else [] for i in (0, 1)]
            return self.sets[turn]
        if turn != self.turn:
            _load(self.inputs, self.spare)
            self.turn = turn
        self.spare = []
        return self.inputs


SWAP_SLICE = 1 << 24  # elements swapped at a time (a 64 MB temporary for float32)


def _load(targets: list[Any], sources: list[Any]) -> None:
    """The sources' values into the targets' memory (``refill``: an expanded input whose rows
    differ is replaced in the list instead, so the callables, which read the list, see it)."""
    for i, (target, source) in enumerate(zip(targets, sources, strict=True)):
        if isinstance(target, torch.Tensor):
            targets[i] = refill(target, source)


def _swap(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exchange the values of two tensors of one shape in place, with one slice's temporary;
    the tensors that hold them after (see ``refill``)."""
    if not (a.is_contiguous() and b.is_contiguous()) or a.numel() <= SWAP_SLICE:
        held = a.clone()
        return refill(a, b), refill(b, held)
    flat_a, flat_b = a.view(-1), b.view(-1)
    held = torch.empty(SWAP_SLICE, dtype=a.dtype, device=a.device)
    for start in range(0, flat_a.numel(), SWAP_SLICE):
        x, y = flat_a[start : start + SWAP_SLICE], flat_b[start : start + SWAP_SLICE]
        part = held[: x.numel()]
        part.copy_(x)
        x.copy_(y)
        y.copy_(part)
    return a, b
