"""Verified replacements swapped into the user's model, without touching their source.

A patch is a ``kforge_patch.py`` (written by :func:`write`) whose ``REGIONS`` name, for each
region, the candidate file and the module paths it replaces. :func:`apply` builds each
candidate's ``ModelNew``, gives it the region's own parameters and buffers (the same tensors,
not copies), and puts it in the region's place behind a :class:`Swapped` module that calls it
only on the call the region was extracted and verified for (the same tensor shapes and dtypes,
the same other arguments) and the original module on any other call. :func:`restore` undoes
it.
"""

from __future__ import annotations

import inspect
import pprint
from pathlib import Path
from typing import Any

import torch

from ..task import import_file
from .extract import load_region_state

PATCH_FILE = "kforge_patch.py"


class PatchError(ValueError):
    """The patch does not fit the model; the message says which region and why."""


class Swapped(torch.nn.Module):
    """The replacement of one region instance, and the original beside it for other calls."""

    def __init__(self, original: torch.nn.Module, new: torch.nn.Module, region: dict[str, Any]) -> None:
        super().__init__()
        self.original = original
        self.new = new
        self.inputs: list[str] = list(region["inputs"])
        self.shapes = {k: (tuple(v[0]), str(v[1])) for k, v in region["shapes"].items()}
        self.fixed: dict[str, str] = dict(region["fixed"])
        self.groups: dict[str, list[str]] = dict(region.get("groups", {}))  # a tuple argument's tensors
        self.signature = inspect.signature(original.forward)
        self.calls = {"new": 0, "original": 0}
        self.region_index = -1  # its place in the patch's REGIONS
        self.enabled = True  # off: the original runs (kforge's end-to-end measurement switches regions)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        tensors = self._match(args, kwargs) if self.enabled else None
        counting = not torch.compiler.is_compiling()  # a counted int would recompile each call
        if tensors is None:
            if counting:
                self.calls["original"] += 1
            return self.original(*args, **kwargs)
        if counting:
            self.calls["new"] += 1
        return self.new(*tensors)

    def _match(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor] | None:
        """The tensors to give ``new``, or None when this call is not the verified one."""
        if not kwargs and not self.fixed and not self.groups and len(args) == len(self.inputs):  # module(x)
            ok = all(
                isinstance(a, torch.Tensor) and (tuple(a.shape), str(a.dtype)) == self.shapes[n]
                for a, n in zip(args, self.inputs, strict=True)
            )
            return list(args) if ok else None
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            return None
        given: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            kind = self.signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                given.update(value)  # as the region was extracted: **kwargs by their own names
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                if value:
                    return None
            else:
                given[name] = value
        for key, parts in self.groups.items():  # a tuple of tensors, as its tensors by name
            value = given.pop(key, None)
            if not isinstance(value, tuple | list) or len(value) != len(parts):
                return None
            given |= dict(zip(parts, value, strict=True))
        for name, value in given.items():
            if name in self.shapes:
                if (
                    not isinstance(value, torch.Tensor)
                    or (tuple(value.shape), str(value.dtype)) != self.shapes[name]
                ):
                    return None
            elif name not in self.fixed or repr(value) != self.fixed[name]:
                return None  # an argument the extracted region never saw, or another value
        if any(name not in given for name in self.inputs):
            return None
        return [given[name] for name in self.inputs]


def read(patch: str | Path | dict[str, Any]) -> tuple[list[dict[str, Any]], Path]:
    """(regions, folder their files are relative to) of a patch file or dict."""
    return _read(patch)[:2]


def _read(patch: str | Path | dict[str, Any]) -> tuple[list[dict[str, Any]], Path, str | None]:
    """(regions, their folder, the torch.compile mode of the whole model or None)."""
    if isinstance(patch, dict):
        return list(patch["regions"]), Path(patch.get("root", ".")), patch.get("whole_model")
    path = Path(patch)
    if path.is_dir():
        path = path / PATCH_FILE
    if not path.is_file():
        raise PatchError(
            f"{path}: no such patch file (kforge model writes {PATCH_FILE} in its output folder)"
        )
    module = import_file(path, f"kforge_patch_{abs(hash(str(path.resolve())))}")
    return list(module.REGIONS), path.parent, getattr(module, "WHOLE_MODEL", None)


def apply(model: torch.nn.Module, patch: str | Path | dict[str, Any]) -> torch.nn.Module:
    """Swap the patch's replacements into ``model`` (in place; returned for chaining), then,
    where the patch says so, compile the whole model (``model.compile(mode=...)``)."""
    regions, root, whole = _read(patch)
    for i, region in enumerate(regions):
        candidate = import_file(root / region["candidate"], f"kforge_patch_candidate_{i}_{id(model)}")
        for path in region["instances"]:
            original = model.get_submodule(path) if path else model
            if isinstance(original, Swapped):
                raise PatchError(f"{path}: already patched (kforge.restore(model) first)")
            new = candidate.ModelNew().eval()
            device = next(iter([*original.parameters(), *original.buffers()]), torch.empty(0)).device
            new = new.to(device)
            missing = load_region_state(new, original, assign=True)
            if missing:
                raise PatchError(
                    f"{path}: the candidate's {missing[0]!r} is not in the model's {type(original).__name__}"
                )
            swapped = Swapped(original, new, region)
            swapped.region_index = i
            _replace(model, path, swapped)
    if whole:
        model.compile(mode=None if whole == "default" else whole)
    return model


def switch(model: torch.nn.Module, on: set[int] | None) -> None:
    """Turn the replacements of the regions numbered in ``on`` on (None: all), the rest off."""
    for module in model.modules():
        if isinstance(module, Swapped):
            module.enabled = on is None or module.region_index in on


def restore(model: torch.nn.Module) -> torch.nn.Module:
    """Put every original module back (and the whole model uncompiled)."""
    model._compiled_call_impl = None  # what model.compile() set
    for path, module in list(model.named_modules()):
        if isinstance(module, Swapped):
            _replace(model, path, module.original)
    return model


def _replace(model: torch.nn.Module, path: str, module: torch.nn.Module) -> None:
    if not path:
        raise PatchError("the whole model is one region: use the candidate's ModelNew in its place")
    parent, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, name, module)


def write(folder: Path, regions: list[dict[str, Any]], header: str, whole_model: str | None = None) -> Path:
    """``folder/kforge_patch.py``: a docstring that says what it replaces and what was
    measured, then ``REGIONS`` (the candidate files it names are relative to ``folder``) and
    ``WHOLE_MODEL``, the torch.compile mode of the patched model or None."""
    lines = [
        f'"""{header.strip()}\n\nApply it:\n\n    import kforge\n    kforge.apply(model, "{PATCH_FILE}")\n"""',
        "",
    ]
    lines.append("REGIONS = " + pprint.pformat(regions, width=100, sort_dicts=False))
    lines += [
        "",
        f"WHOLE_MODEL = {whole_model!r}  # torch.compile mode of the patched model (None: not compiled)",
    ]
    path = folder / PATCH_FILE
    path.write_text("\n".join(lines) + "\n")
    return path
