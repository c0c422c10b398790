"""A model SPEC: ``path/to/file.py:factory`` where ``factory()`` returns ``(model,
example_inputs)``, or ``path/to/file.py`` defining ``get_model()`` and ``get_inputs()``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from ..task import import_file

PRECISIONS = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16}


class ModelSpecError(ValueError):
    """The SPEC does not give a model and inputs; the message says what to do."""


@dataclasses.dataclass
class Loaded:
    model: torch.nn.Module
    inputs: list[Any]
    name: str  # the file's stem, or stem.factory


def parse(spec: str) -> tuple[Path, str | None]:
    """(file, factory or None). Raises ModelSpecError."""
    path, _, factory = spec.partition(":") if not Path(spec).exists() else (spec, "", "")
    file = Path(path)
    if file.suffix != ".py" or not file.is_file():
        raise ModelSpecError(
            f"{spec}: give a Python file, FILE.py:factory or FILE.py with get_model and get_inputs"
        )
    return file.resolve(), factory or None


def load(spec: str, precision: str = "fp32", device: str = "cpu") -> Loaded:
    """The model in eval mode on ``device`` at ``precision``, and its inputs there."""
    if precision not in PRECISIONS:
        raise ModelSpecError(f"unknown precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    file, factory = parse(spec)
    module = import_file(file, f"kforge_model_{file.stem}")
    if factory:
        fn = getattr(module, factory, None)
        if not callable(fn):
            raise ModelSpecError(f"{file.name} has no function {factory!r}")
        made = fn()
        if not (isinstance(made, tuple | list) and len(made) == 2):
            raise ModelSpecError(f"{file.name}:{factory} must return (model, example_inputs)")
        model, inputs = made
    else:
        if not (
            callable(getattr(module, "get_model", None)) and callable(getattr(module, "get_inputs", None))
        ):
            raise ModelSpecError(f"{file.name} defines no get_model and get_inputs: give FILE.py:factory")
        model, inputs = module.get_model(), module.get_inputs()
    if not isinstance(model, torch.nn.Module):
        raise ModelSpecError(f"{spec}: the model is a {type(model).__name__}, not a torch.nn.Module")
    inputs = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
    dtype = PRECISIONS[precision]
    model = model.to(device=device, dtype=dtype).eval()
    moved = [cast(x, device, dtype) for x in inputs]
    name = file.stem + (f".{factory}" if factory else "")
    return Loaded(model, moved, name)


def cast(x: Any, device: str | torch.device, dtype: torch.dtype) -> Any:
    """A tensor input on ``device``; floating ones in ``dtype``."""
    if not isinstance(x, torch.Tensor):
        return x
    return x.to(device=device, dtype=dtype if x.is_floating_point() else x.dtype)
