"""Peak memory of an evaluation, as the Result reports it.

On the GPU: bytes held by torch's caching allocator (``max_memory_allocated``). On the CPU,
which has no allocator statistics: the worker's resident memory (Linux ``VmRSS``/``VmHWM``;
large tensors are mapped and unmapped one by one, so it follows them). Both are measured
above what was held when the meter started, so what a peak counts is the evaluation's
tensors: inputs, outputs, the evaluator's copies and what the models allocate.
"""

from __future__ import annotations

import gc
import re
import warnings
from pathlib import Path

import torch

MB = 2**20
_STATUS = Path("/proc/self/status")


class MemoryMeter:
    """The highest memory use since it started, and per region (:meth:`start_region`)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._peak = 0  # bytes above the start, over all finished regions
        self._base = self._current()
        self.start_region()

    def start_region(self) -> int:
        """Fold the peak so far into the total and start measuring a new region; returns the
        bytes in use now (above the meter's start)."""
        self._peak = max(self._peak, self._region_peak())
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            _reset_resident_peak()
        return self._current() - self._base

    def region_peak(self) -> int:
        """Bytes above the meter's start at the highest point of the current region."""
        return self._region_peak()

    def peak_mb(self) -> float:
        return max(self._peak, self._region_peak()) / MB

    def _region_peak(self) -> int:
        if self.device.type == "cuda":
            return max(0, torch.cuda.max_memory_allocated(self.device) - self._base)
        return max(0, _read_status_kb("VmHWM") * 1024 - self._base)

    def _current(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device)
        return _read_status_kb("VmRSS") * 1024


def _read_status_kb(field: str) -> int:
    try:
        found = re.search(rf"^{field}:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        return 0
    return int(found.group(1)) if found else 0


def _reset_resident_peak() -> None:
    """Linux resets VmHWM to the current resident size when 5 is written to clear_refs."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass  # no procfs: the peak is then the process's since it started


def allocated_mb(device: torch.device) -> float:
    """MB held by live tensors of this process on ``device`` (0 off CUDA)."""
    return torch.cuda.memory_allocated(device) / MB if device.type == "cuda" else 0.0


def big_tensors(device: torch.device, over: int = 1 << 30) -> str:
    """The live tensors of this process on ``device`` over ``over`` bytes that Python can
    reach, by shape and size, for an out-of-memory message; storage is counted once."""
    seen: dict[int, str] = {}
    with warnings.catch_warnings():  # isinstance on every object touches deprecated module attributes
        warnings.simplefilter("ignore")
        objects = gc.get_objects()
        tensors = [obj for obj in objects if isinstance(obj, torch.Tensor)]
    del objects
    for obj in tensors:
        try:
            if obj.device == device:
                storage = obj.untyped_storage()
                if storage.nbytes() > over:
                    seen.setdefault(
                        storage.data_ptr(), f"{list(obj.shape)} {storage.nbytes() / 2**30:.1f} GB"
                    )
        except Exception:  # a tensor subclass or a half-built object: not what we are looking for
            continue
    return "; ".join(seen.values()) or "none Python can reach"
