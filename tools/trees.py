"""Model inputs and outputs are tensors or (nested) lists, tuples and mappings of them (a
transformers model returns a ``ModelOutput``, an ordered mapping)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping
from typing import Any

import torch


def flatten(obj: Any) -> list[Any]:
    """The leaves of nested lists, tuples and mappings (their values, in order), in order."""
    if isinstance(obj, list | tuple):
        return [x for item in obj for x in flatten(item)]
    if isinstance(obj, Mapping):
        return [x for item in obj.values() for x in flatten(item)]
    return [obj]


def clone(obj: Any, to: torch.device | None = None) -> Any:
    """A copy whose tensors own their memory (detached), with the same nesting; on device ``to``
    where given."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone() if to is None else obj.detach().to(to, copy=True)
    if isinstance(obj, list | tuple):
        return type(obj)(clone(x, to) for x in obj)
    if isinstance(obj, MutableMapping):
        copied = copy.copy(obj)  # the same type (a ModelOutput stays one), its values cloned
        for key, value in obj.items():
            copied[key] = clone(value, to)
        return copied
    if isinstance(obj, Mapping):
        return {key: clone(value, to) for key, value in obj.items()}
    return obj


def refill(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """``new``'s values in ``old``'s memory, returned (a candidate that caches on data pointers
    sees the new values); ``new`` itself where ``old`` cannot hold them. An input made by
    ``expand`` (position ids repeated over the batch) has elements that share memory, which
    ``copy_`` refuses: its distinct elements are written where ``new`` is expanded over the same
    dimensions; where the values differ along them, or the layout overlaps otherwise (which
    ``copy_`` does not always notice), ``new`` is returned."""
    if not _overlaps(old):
        return old.copy_(new)
    shared = [d for d, (n, s) in enumerate(zip(old.shape, old.stride(), strict=True)) if s == 0 and n > 1]
    if old.shape != new.shape or any(new.stride(d) != 0 for d in shared):
        return new
    into, values = old, new
    for d in shared:
        into, values = into.narrow(d, 0, 1), values.narrow(d, 0, 1)
    if _overlaps(into):
        return new
    into.copy_(values)
    return old


def _overlaps(t: torch.Tensor) -> bool:
    """Whether two elements of ``t`` may share memory: its dimensions by stride, each must step
    past the whole extent of the ones below it (every view of a dense tensor does)."""
    reach = 1
    for stride, size in sorted((s, n) for n, s in zip(t.shape, t.stride(), strict=True) if n > 1):
        if stride < reach:
            return True
        reach = stride * size
    return False


def release(device: torch.device) -> None:
    """Hand the caching allocator's free blocks back to the driver. The judge and the candidate
    share one GPU from two processes: memory one holds cached (a float64 reference's temporaries)
    is memory the other cannot allocate."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
