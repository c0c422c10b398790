"""The modules of a model worth a kernel: their calls and their share of the time.

A region is a module whose children are all leaves (a block of a few layers: an MLP, an
attention, a ResNet bottleneck), or a leaf reached on the way down that holds time (a stem
convolution, a classifier). Repeated regions (the same class and structure called on the
same shapes: the twelve MLPs of a transformer) are one task with several instances.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch

CONTAINERS = (torch.nn.ModuleList, torch.nn.ModuleDict)
MIN_SHARE = 0.01  # a region under this share of the model's time is not worth a task


@dataclasses.dataclass
class Call:
    """The first call of a module during one forward: its arguments as given."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    count: int = 1  # calls of this module in one forward


@dataclasses.dataclass
class Region:
    path: str  # the first instance's module path ("" is the whole model)
    kind: str  # its class name
    instances: list[str]
    host_ms: float = 0.0  # all instances, one forward
    device_ms: float = 0.0
    share: float = 0.0  # of the model's time (device time on a GPU, host time on a CPU)
    task: str = ""  # the task file, once written
    note: str = ""  # why it has no task, when it has none

    @property
    def label(self) -> str:
        return self.path or "(whole model)"


def record_calls(model: torch.nn.Module, inputs: list[Any]) -> dict[str, Call]:
    """Every module's first call (its arguments as given) in one forward of ``model``."""
    calls: dict[str, Call] = {}
    handles = []

    def hook(path: str) -> Callable[..., None]:
        def pre(_module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if path in calls:
                calls[path].count += 1
            else:
                calls[path] = Call(args, dict(kwargs))

        return pre

    for path, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(hook(path), with_kwargs=True))
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    return calls


def leaf(module: torch.nn.Module) -> bool:
    return next(module.children(), None) is None


def compact(module: torch.nn.Module) -> bool:
    """Whether every child is a leaf, or a container or Sequential of leaves."""
    children = list(module.children())
    if not children or isinstance(module, CONTAINERS):
        return False
    return all(
        leaf(c) or (isinstance(c, (*CONTAINERS, torch.nn.Sequential)) and all(map(leaf, c.children())))
        for c in children
    )


def candidates(model: torch.nn.Module, calls: dict[str, Call], start: str = "") -> Iterator[str]:
    """Module paths under ``start``, top down: a called compact module or leaf is a region;
    any other module is looked into."""
    module = model.get_submodule(start) if start else model
    if start in calls and (compact(module) or leaf(module)):
        yield start
        return
    for name, _child in module.named_children():
        yield from candidates(model, calls, f"{start}.{name}" if start else name)


def signature(module: torch.nn.Module, call: Call) -> str:
    """What makes two regions the same task: class, structure and the arguments' shapes."""
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}|{module!r}|{describe(call.args)}|{describe(call.kwargs)}"


def describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"T{tuple(value.shape)}:{value.dtype}:{value.stride()}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}={describe(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, tuple | list):
        return "(" + ",".join(describe(v) for v in value) + ")"
    return repr(value)[:200]


def group(model: torch.nn.Module, calls: dict[str, Call], paths: list[str]) -> list[Region]:
    """One Region per distinct signature, its instances in model order."""
    by_key: dict[str, Region] = {}
    for path in paths:
        module = model.get_submodule(path) if path else model
        key = signature(module, calls[path])
        if key in by_key:
            by_key[key].instances.append(path)
        else:
            by_key[key] = Region(path=path, kind=type(module).__name__, instances=[path])
    return list(by_key.values())


def profile(
    model: torch.nn.Module, inputs: list[Any], paths: list[str], iters: int = 5
) -> tuple[dict[str, tuple[float, float]], tuple[float, float]]:
    """Per path, (host ms, device ms) of one forward under torch.profiler, and the same for the
    whole forward. Each module's calls are labelled ``kforge:PATH`` (its forward wrapped, then
    restored); device time is the kernels' time under the label (0 on a CPU)."""
    labels = {path: f"kforge:{path}" for path in paths}
    restore = []
    for path in paths:
        if not path:
            continue
        module = model.get_submodule(path)
        restore.append(module)
        module.forward = _labelled(labels[path], module.forward)  # type: ignore[method-assign]
    activities = [torch.profiler.ProfilerActivity.CPU]
    cuda = any(isinstance(x, torch.Tensor) and x.is_cuda for x in inputs)
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    try:
        with torch.no_grad():
            for _ in range(2):
                model(*inputs)  # warm
            with torch.profiler.profile(activities=activities) as prof:
                for _ in range(iters):
                    with torch.profiler.record_function("kforge:(model)"):
                        model(*inputs)
                if cuda:
                    torch.cuda.synchronize()
    finally:
        for module in restore:
            del module.forward
    totals: dict[str, tuple[float, float]] = {}
    for event in prof.key_averages():
        if event.key.startswith("kforge:"):
            device_us = getattr(event, "device_time_total", 0.0) or 0.0
            totals[event.key] = (event.cpu_time_total / 1e3 / iters, device_us / 1e3 / iters)
    whole = totals.get("kforge:(model)", (0.0, 0.0))
    per_path = {path: totals.get(labels[path], (0.0, 0.0)) for path in paths}
    if "" in per_path:
        per_path[""] = whole
    return per_path, whole


def _labelled(label: str, forward: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        with torch.profiler.record_function(label):
            return forward(*args, **kwargs)

    return run


def measure_shares(model: torch.nn.Module, inputs: list[Any], regions: list[Region]) -> tuple[float, float]:
    """Fill each region's time and share (all its instances); returns the whole forward's
    (host ms, device ms)."""
    paths = [p for r in regions for p in r.instances]
    per_path, (host, device) = profile(model, inputs, paths)
    for region in regions:
        region.host_ms = sum(per_path[p][0] for p in region.instances)
        region.device_ms = sum(per_path[p][1] for p in region.instances)
        own, whole = (region.device_ms, device) if device > 0 else (region.host_ms, host)
        region.share = own / whole if whole > 0 else 0.0
    return host, device
