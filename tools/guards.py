"""Runtime guards against candidates that cheat the evaluator.

They run in the candidate's own worker, as a second line behind the process boundary
(the judge never runs candidate code): each snapshots what an honest candidate leaves
alone (timers, precision flags, live threads) and reports a reason string for every
violation it sees. What they report is believed only against the candidate.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
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
