"""Model inputs and outputs are tensors or (nested) lists and tuples of them."""

from __future__ import annotations

from typing import Any

import torch


def flatten(obj: Any) -> list[Any]:
    """The leaves of nested lists and tuples, in order."""
    if isinstance(obj, list | tuple):
        return [x for item in obj for x in flatten(item)]
    return [obj]


def clone(obj: Any) -> Any:
    """A copy whose tensors own their memory (detached), with the same nesting."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, list | tuple):
        return type(obj)(clone(x) for x in obj)
    return obj
