"""Runtime guards against candidates that cheat the evaluator.

Each guard snapshots what an honest candidate leaves alone (timers, precision flags,
the task's sizes, live threads) or watches what it must not do (call the reference
Model), and reports a reason string for every violation it sees.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from .trees import flatten


def _timer_table() -> dict[str, Any]:
    """The objects our timing relies on, by name."""
    table: dict[str, Any] = {
        "time.perf_counter": time.perf_counter,
        "time.perf_counter_ns": time.perf_counter_ns,
        "time.time": time.time,
        "time.monotonic": time.monotonic,
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.cuda.current_stream": torch.cuda.current_stream,
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Stream.synchronize": torch.cuda.Stream.synchronize,
        "torch.cuda.Stream.wait_stream": torch.cuda.Stream.wait_stream,
    }
    for name in ("__init__", "__new__", "record", "elapsed_time", "synchronize", "query"):
        table[f"torch.cuda.Event.{name}"] = getattr(torch.cuda.Event, name)
    # What the verifier compares outputs with.
    for name in ("allclose", "equal", "isfinite", "isnan", "nan_to_num"):
        table[f"torch.{name}"] = getattr(torch, name)
    table["torch.linalg.vector_norm"] = torch.linalg.vector_norm
    for name in (
        "double",
        "abs",
        "max",
        "sum",
        "any",
        "clone",
        "copy_",
        "nan_to_num",
        "isnan",
        "__sub__",
        "__eq__",
    ):
        table[f"torch.Tensor.{name}"] = getattr(torch.Tensor, name)
    return table


class TimerGuard:
    """Detects patched timers, events, synchronisation functions and the functions the
    verifier compares outputs with."""

    def __init__(self) -> None:
        self._snapshot = _timer_table()
        # Our own references, taken before any candidate code ran.
        self.perf_counter = time.perf_counter
        self.synchronize = torch.cuda.synchronize
        self.Event = torch.cuda.Event

    def violations(self) -> list[str]:
        now = _timer_table()
        changed = sorted(name for name, obj in self._snapshot.items() if now[name] is not obj)
        return (
            [f"patched timer, synchronisation or checker function: {', '.join(changed)}"] if changed else []
        )


class PrecisionGuard:
    """Detects a candidate switching on TF32 or lower matmul precision behind our back."""

    def __init__(self) -> None:
        self._snapshot = self._read()

    @staticmethod
    def _read() -> dict[str, Any]:
        return {
            "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "allow_fp16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
            "allow_bf16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        }

    def violations(self) -> list[str]:
        now = self._read()
        changed = sorted(k for k, v in self._snapshot.items() if now[k] != v)
        return [f"precision lowered: changed {', '.join(changed)}"] if changed else []


def set_precision_flags(precision: str) -> None:
    """fp32 is strict: no TF32 anywhere, for the reference and baselines too."""
    allow_tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    torch.backends.cudnn.allow_tf32 = allow_tf32
    torch.set_float32_matmul_precision("high" if allow_tf32 else "highest")


class SizeGuard:
    """Detects a candidate changing the task's problem sizes (its constants or get_inputs)."""

    def __init__(self, task_module: types.ModuleType) -> None:
        self._module = task_module
        self._constants = self._read_constants()
        self._shapes = self._input_shapes()

    def _read_constants(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in vars(self._module).items()
            if not k.startswith("_") and isinstance(v, int | float | tuple | str) and not isinstance(v, bool)
        }

    def _input_shapes(self) -> list[Any]:
        """Shapes and dtypes of get_inputs(), drawn on the meta device (no memory: KernelBench
        has 8 GB inputs); a get_inputs that cannot run there is called for real."""
        try:
            with torch.device("meta"):
                inputs = self._module.get_inputs()
        except Exception:
            inputs = self._module.get_inputs()
        return [(tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else x for x in inputs]

    def violations(self) -> list[str]:
        reasons = []
        now = self._read_constants()
        changed = sorted(k for k, v in self._constants.items() if now.get(k) != v)
        if changed:
            reasons.append(f"problem sizes changed: task constants {', '.join(changed)} were modified")
        if self._input_shapes() != self._shapes:
            reasons.append("problem sizes changed: get_inputs() now returns other shapes")
        return reasons


class ReferenceGuard:
    """Counts calls into the reference Model while candidate code runs."""

    def __init__(self, model_cls: type[torch.nn.Module]) -> None:
        self.calls = 0
        self._armed = False
        guard = self
        original_forward = model_cls.forward
        original_init = model_cls.__init__

        def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
            if guard._armed:
                guard.calls += 1
            return original_forward(self, *args, **kwargs)

        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            if guard._armed:
                guard.calls += 1
            original_init(self, *args, **kwargs)

        model_cls.forward = forward  # type: ignore[method-assign]
        model_cls.__init__ = init  # type: ignore[method-assign]

    @contextmanager
    def armed(self) -> Iterator[None]:
        self._armed = True
        try:
            yield
        finally:
            self._armed = False

    def violations(self) -> list[str]:
        if self.calls:
            return [f"calls the reference Model ({self.calls} calls while the candidate ran)"]
        return []


class ThreadGuard:
    """Detects candidate work still running on another thread after forward returned.

    Threads started by libraries (compile workers, thread pools idling) are allowed;
    a live thread that runs candidate code, or was started with a candidate function
    as its target, is not.
    """

    def __init__(self, candidate_file: str) -> None:
        self.candidate_file = candidate_file
        self.leftover: set[str] = set()

    @contextmanager
    def watching(self) -> Iterator[None]:
        try:
            yield
        finally:
            self.leftover.update(self._threads_running_candidate_code())

    def _threads_running_candidate_code(self) -> set[str]:
        frames = sys._current_frames()
        found = set()
        for thread in threading.enumerate():
            if thread is threading.current_thread() or not thread.is_alive():
                continue
            target = getattr(thread, "_target", None) or type(thread).run
            code = getattr(target, "__code__", None)
            if code is not None and code.co_filename == self.candidate_file:
                found.add(thread.name)
                continue
            frame = frames.get(thread.ident) if thread.ident is not None else None
            while frame is not None:
                if frame.f_code.co_filename == self.candidate_file:
                    found.add(thread.name)
                    break
                frame = frame.f_back
        return found

    def violations(self) -> list[str]:
        if self.leftover:
            names = ", ".join(sorted(self.leftover))
            return [
                f"work on a background thread: {names} still running candidate code after forward returned"
            ]
        return []


def check_output_types(outputs: Any, device: torch.device) -> list[str]:
    """Outputs must be plain, materialised tensors on the expected device."""
    reasons = []
    for out in flatten(outputs):
        if not isinstance(out, torch.Tensor):
            continue
        if type(out) is not torch.Tensor:
            reasons.append(f"output is a tensor subclass ({type(out).__name__}), not a plain torch.Tensor")
        elif out.is_meta or out.layout != torch.strided:
            reasons.append("output has no materialised storage (meta or non-strided layout)")
        elif out.numel() and out.untyped_storage().data_ptr() == 0:
            reasons.append("output has no storage")
        elif out.device.type != device.type:
            reasons.append(f"output on {out.device.type}, expected {device.type}")
    return reasons


def run_guarded(fn: Callable[[], Any], threads: ThreadGuard, reference: ReferenceGuard) -> Any:
    with threads.watching(), reference.armed():
        return fn()
