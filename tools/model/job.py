"""The worker jobs of ``kforge model`` (:mod:`..worker` modes ``model-extract`` and
``model-measure``): the user's model code runs in a contained worker, like a task's.

``model-extract``: load the SPEC, find the regions, trace each into a task (a region that
cannot be traced is replaced by its children), profile them, write the tasks of those with
at least ``min_share`` of the time; returns the manifest.

``model-measure``: load the SPEC, apply a patch, verify it end to end, time each region's
replacement alone in the model (a region whose win does not survive there is dropped), then
verify and time the kept patch beside eager and torch.compile; returns the figures.
"""

from __future__ import annotations

import copy
import inspect
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ..guards import PrecisionGuard, TimerGuard, set_precision_flags
from . import e2e, extract, keep, patch, regions, spec
from .regions import Call, Region

NO_WORK = {"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "Identity", "Flatten"}


def run(job: dict[str, Any]) -> dict[str, Any]:
    set_precision_flags("fp32" if job["precision"] == "bf16" else job["precision"])
    try:
        loaded = spec.load(job["model_spec"], job["precision"], job["device"])
    except spec.ModelSpecError as err:
        return {"error": str(err)}
    if job["mode"] == "model-extract":
        share = float(job.get("min_share", regions.MIN_SHARE))
        return extract_regions(loaded, Path(job["out"]), share, job.get("max_regions"))
    return measure(loaded, job)


def extract_regions(
    loaded: spec.Loaded, out: Path, min_share: float, max_regions: int | None = None
) -> dict[str, Any]:
    model, inputs = loaded.model, loaded.inputs
    try:
        calls = regions.record_calls(model, inputs)
    except Exception as err:  # the user's forward on their own inputs: said in one line
        return {"error": f"the model's forward raised {type(err).__name__}: {extract.first_line(err)}"}
    sources: dict[str, extract.Extracted] = {}
    skipped: list[dict[str, str]] = []
    paths = _traceable(model, calls, list(regions.candidates(model, calls)), sources, skipped)
    found = regions.group(model, calls, paths)
    if not found:
        reasons = "; ".join(f"{s['path'] or '(whole model)'}: {s['reason']}" for s in skipped[:3])
        return {"error": f"no region of the model could be captured ({reasons or 'it has no submodule'})"}
    host, device = regions.measure_shares(model, inputs, found)
    found.sort(key=lambda r: -r.share)
    tasks = out / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    for n, region in enumerate(found):
        if region.kind in NO_WORK:
            region.note = "no work in inference: no task"
            continue
        if region.share < min_share:
            region.note = f"{region.share:.1%} of the time, under {min_share:.0%}: no task"
            continue
        if max_regions is not None and sum(1 for r in found if r.task) >= max_regions:
            region.note = f"not among the {max_regions} largest (--max-regions): no task"
            continue
        path = tasks / f"r{n:02d}_{_slug(region.kind)}.py"
        made = sources[region.path]
        path.write_text(made.source)
        module = model.get_submodule(region.path) if region.path else model
        try:
            extract.check(path, module, calls[region.path], made.inputs)
        except extract.ExtractError as err:
            path.unlink()
            region.note = f"not extracted: {err}"
            continue
        region.task = str(path.relative_to(out))
    return {
        "model": loaded.name,
        "device": str(inputs[0].device) if inputs and isinstance(inputs[0], torch.Tensor) else "cpu",
        "forward_host_ms": host,
        "forward_device_ms": device,
        "parameters": sum(p.numel() for p in model.parameters()),
        "regions": [_region_json(r, sources.get(r.path)) for r in found],
        "skipped": skipped,
    }


def _traceable(
    model: torch.nn.Module,
    calls: dict[str, Call],
    paths: list[str],
    sources: dict[str, extract.Extracted],
    skipped: list[dict[str, str]],
) -> list[str]:
    """The paths whose module traces into a task; one that does not is replaced by the
    regions among its children (and said, with the reason, in ``skipped``)."""
    kept: list[str] = []
    done: dict[str, extract.Extracted | str] = {}  # by signature: repeated blocks trace once
    for path in paths:
        module = model.get_submodule(path) if path else model
        key = regions.signature(module, calls[path])
        if key not in done:
            try:
                done[key] = extract.extract(module, calls[path], _doc(path, module, calls[path]))
            except extract.ExtractError as err:
                done[key] = str(err)
        made = done[key]
        if isinstance(made, extract.Extracted):
            sources[path] = made
            kept.append(path)
            continue
        children = [f"{path}.{name}" if path else name for name, _ in module.named_children()]
        inner = [p for child in children for p in regions.candidates(model, calls, child)]
        skipped.append(
            {
                "path": path,
                "kind": type(module).__name__,
                "reason": made,
                "instead": f"{len(inner)} inner regions",
            }
        )
        kept += _traceable(model, calls, inner, sources, skipped)
    return kept


def _doc(path: str, module: torch.nn.Module, call: Call) -> str:
    return (
        f"Region {path or '(whole model)'} ({type(module).__name__}) of the user's model, written as a "
        f"KernelBench task by kforge model.\nIts tensor arguments are drawn at the shapes it was called "
        f"with; its parameters at the real ones' mean and spread."
    )


def _region_json(region: Region, made: extract.Extracted | None) -> dict[str, Any]:
    return {
        "path": region.path,
        "kind": region.kind,
        "instances": region.instances,
        "host_ms": region.host_ms,
        "device_ms": region.device_ms,
        "share": region.share,
        "task": region.task,
        "note": region.note,
        "inputs": made.inputs if made else [],
        "fixed": made.fixed if made else {},
        "shapes": made.shapes if made else {},
        "groups": made.groups if made else {},
    }


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")[:40] or "region"


def measure(loaded: spec.Loaded, job: dict[str, Any]) -> dict[str, Any]:
    """Verify the patch end to end, keep the regions whose replacement alone speeds the
    model up, verify the kept patch, and time it beside eager and torch.compile."""
    model, inputs = loaded.model, loaded.inputs
    device = torch.device(job["device"])
    ref64 = copy.deepcopy(model).double()
    baseline = copy.deepcopy(model)  # eager's and torch.compile's, untouched by the patch
    guards = _Guards()  # the replacements' code runs in this process from here on
    try:
        patch.apply(model, {"regions": job["patch"], "root": job["root"]})
    except patch.PatchError as bad:
        return {"error": str(bad)}
    trials, n = int(job.get("trials", 30)), len(job["patch"])

    def variant(on: set[int] | None) -> e2e.Forward:
        def forward(*args: Any) -> Any:
            patch.switch(model, on)
            return model(*args)

        return forward

    def eager(*args: Any) -> Any:  # the model as the user has it: no wrapper on any region
        return baseline(*args)

    out: dict[str, Any] = {"device": str(device), "regions": n, "alone": {}, "kept": []}
    ok, why, err = e2e.verify(
        ref64, eager, variant(None), inputs, loaded_precision(job), seed=int(job.get("seed", 0))
    )
    out["verified_all"] = {"correct": ok, "reason": why, "error": err}
    kept = keep.regions(variant, eager, ref64, loaded, job, out) if ok and n else set()
    _unwrap(model, set(range(n)) - kept)  # the patch as written: wrappers on the kept regions only
    patch.switch(model, None)
    variants: dict[str, e2e.Forward] = {"eager": eager, "patched": model}
    variants |= _whole_model(model, ref64, eager, loaded, job, out)
    variants |= _compiled_baselines(baseline, inputs, job.get("compile_modes", ["default"]), out)
    timed: dict[str, Any] = {}
    out["times_ms"] = times = e2e.time_variants(variants, inputs, device, trials, timed)
    wrong = e2e.timed_errors(timed, ref64, inputs, loaded_precision(job))
    if job.get("profile_paths"):  # the time by region after, beside the extraction's before
        with torch.no_grad():
            after, whole = regions.profile(model, inputs, list(job["profile_paths"]))
        out["after"] = {"regions": after, "forward": whole}
    wrong += [keep.which(name) for name in out.pop("wrong_alone", [])]
    cheats = guards.violations() + [f"{name} computed other values while timed" for name in wrong]
    if cheats:
        return {"error": f"rejected end to end: {'; '.join(cheats)}"}
    _choose(times, out)
    return out


def _choose(times: dict[str, float], out: dict[str, Any]) -> None:
    """The patch is the fastest patched variant, unless torch.compile of the untouched model
    beat them all: then the patch swaps nothing and compiles the model in that mode (never
    slower than the best baseline)."""
    best = min((k for k in times if k.startswith("patched")), key=lambda k: times[k])
    out["whole_model"] = best.removeprefix("patched+compile:") if best != "patched" else None
    baselines = [k for k in times if k.startswith("compile:")]
    fastest = min(baselines, key=lambda k: times[k], default=None)
    if fastest is not None and times[fastest] < times[best]:
        mode = fastest.removeprefix("compile:")
        out["fallback"] = f"torch.compile(mode={mode!r}) of the model as it is measured fastest"
        out["kept"], out["whole_model"] = [], mode  # summary: the patch's time is that baseline's


def _compiled_baselines(
    baseline: torch.nn.Module, inputs: list[Any], modes: list[str], out: dict[str, Any]
) -> dict[str, e2e.Forward]:
    """torch.compile of the untouched model in each mode, compiled (and the time that took)."""
    found: dict[str, e2e.Forward] = {}
    for mode in modes:
        started = time.perf_counter()
        compiled = torch.compile(baseline, mode=None if mode == "default" else mode)
        with torch.no_grad():
            compiled(*inputs)
        out.setdefault("compile_s", {})[mode] = time.perf_counter() - started
        found[f"compile:{mode}"] = compiled
    return found


def _whole_model(
    model: torch.nn.Module,
    ref64: torch.nn.Module,
    eager: e2e.Forward,
    loaded: spec.Loaded,
    job: dict[str, Any],
    out: dict[str, Any],
) -> dict[str, e2e.Forward]:
    """Whole-model candidates: the patched model through torch.compile in each of
    ``whole_modes`` (reduce-overhead: a CUDA graph of the whole forward), each verified."""
    found: dict[str, e2e.Forward] = {}
    graphs = [
        r.get("strategy") or "?"
        for i, r in enumerate(job["patch"])
        if i in out["kept"] and replays_graphs(r, job["root"])
    ]
    for mode in job.get("whole_modes", []) if graphs else []:  # a capture inside theirs can kill the context
        why = f"not tried: kept regions replay CUDA graphs of their own ({', '.join(graphs)})"
        out.setdefault("whole_verified", {})[mode] = {"correct": False, "reason": why, "error": 0.0}
    for mode in job.get("whole_modes", []) if not graphs else []:
        compiled = torch.compile(model, mode=None if mode == "default" else mode)
        try:
            ok, why, err = e2e.verify(ref64, eager, compiled, loaded.inputs, loaded_precision(job), seed=2)
        except Exception as error:  # the compiler's failure is this candidate's, not the run's
            ok, why, err = False, f"{type(error).__name__}: {extract.first_line(error)}", 0.0
        out.setdefault("whole_verified", {})[mode] = {"correct": ok, "reason": why, "error": err}
        if ok:
            found[f"patched+compile:{mode}"] = compiled
    return found


def replays_graphs(region: dict[str, Any], root: str | Path) -> bool:
    """Whether the region's replacement replays CUDA graphs (by its strategy, or its source)."""
    strategy = str(region.get("strategy") or "")
    if "cuda-graph" in strategy or "reduce-overhead" in strategy:
        return True
    if "max-autotune" in strategy and "no-cudagraphs" not in strategy:
        return True
    source = Path(root, region["candidate"])
    text = source.read_text(errors="replace") if source.is_file() else ""
    return any(
        mark in text for mark in ("CUDAGraph", "cuda.graph(", "reduce-overhead", "make_graphed_callables")
    )


class _Guards:
    """What the end-to-end figures rely on, snapshotted before any replacement's code is
    imported: the timers and checkers (:mod:`..guards`), the precision flags, and kforge's own
    timing and verification functions. Each replacement was judged on its own by the
    two-process evaluator; here, in one process with the model, a change to any of these
    rejects the measurement."""

    def __init__(self) -> None:
        self.timers, self.precision = TimerGuard(), PrecisionGuard()
        self.own = self._own()

    @staticmethod
    def _own() -> dict[str, Any]:
        """Every function and class (and class member) the figures go through, by the name
        each module reaches it by (``compare.flatten`` too), and the precision classes."""
        from .. import compare, precision, timing, trees

        table: dict[str, Any] = {f"PRECISIONS[{k}]": v for k, v in precision.PRECISIONS.items()}
        for module in (e2e, keep, compare, trees, timing, precision, sys.modules[__name__]):
            for name, obj in vars(module).items():
                if inspect.isfunction(obj) or inspect.isbuiltin(obj):
                    table[f"{module.__name__}.{name}"] = obj
                elif inspect.isclass(obj) and obj.__module__ == module.__name__:
                    table |= {f"{module.__name__}.{name}.{k}": v for k, v in vars(obj).items() if callable(v)}
        return table

    def violations(self) -> list[str]:
        now = self._own()
        changed = sorted(name for name, obj in self.own.items() if now[name] is not obj)
        mine = [f"patched kforge's own timing or verification: {', '.join(changed)}"] if changed else []
        return self.timers.violations() + self.precision.violations() + mine


def _unwrap(model: torch.nn.Module, regions: set[int]) -> None:
    """Put the original modules back where the patch's regions numbered in ``regions`` were."""
    for path, module in list(model.named_modules()):
        if isinstance(module, patch.Swapped) and module.region_index in regions:
            parent, _, name = path.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, name, module.original)


def loaded_precision(job: dict[str, Any]) -> str:
    return str(job["precision"])
