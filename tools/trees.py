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


def release(device: torch.device) -> None:
    """Hand the caching allocator's free blocks back to the driver. The judge and the candidate
    share one GPU from two processes: memory one holds cached (a float64 reference's temporaries)
    is memory the other cannot allocate."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
