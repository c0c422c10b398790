"""The pipeline of ``kforge model``: extract the hot regions into tasks (a contained worker
runs the user's code, :mod:`kforge.tools.model.job`), optimize each task with the batch
machinery (rounds spent by each region's share of the time), assemble the verified winners
into a patch, and measure the patch end to end (another worker), dropping the regions whose
win does not survive in the model.

Everything lands in the output folder: ``manifest.json`` (the regions and their profile),
``tasks/``, ``batch/`` (each task's runs, ``results.jsonl``), ``candidates/``,
``kforge_patch.py``, ``e2e.json`` and ``summary.json``/``summary.md``/``report.html``. A
killed run started again on the same folder keeps what was done: the extraction, the
finished tasks.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from ...tools.evaluate import run_model_job
from ...tools.model import patch as patch_file
from ...tools.model.job import replays_graphs
from ...tools.model.spec import ModelSpecError, parse
from ...tools.output import output_folder
from ..batch.job import BatchOptions, run_task
from ..batch.results import append_line, read_results
from ..batch.tasks import TaskEntry
from ..evaluator import eval_options
from ..settings import RunSettings
from . import summary

Say = Callable[[Any], None]  # a line or a rich table
WIN = 1.0  # a region's best must beat eager on the region by more than this to enter the patch


class ModelRunError(RuntimeError):
    """The model could not be loaded, captured or measured; the message is one line."""


@dataclasses.dataclass
class ModelOptions:
    spec: str
    out: Path
    settings: RunSettings
    policy: str = "embedded"
    families: tuple[str, ...] | None = None  # the embedded policy tries only these strategy families
    rounds: int = 6  # rounds across all regions, spent by share (each region at least one)
    min_share: float = 0.02
    max_regions: int | None = None  # at most this many tasks, the largest shares first
    compile_modes: tuple[str, ...] = ("default", "reduce-overhead", "max-autotune")
    whole_modes: tuple[str, ...] = ("default", "reduce-overhead")  # the patched model through torch.compile
    trials: int = 30  # timed whole-model calls per variant
    extract_only: bool = False


def optimize_model(options: ModelOptions, say: Say = print) -> dict[str, Any]:
    """Run the pipeline; the summary (also written to ``summary.json``)."""
    try:
        file, factory = parse(options.spec)
    except ModelSpecError as err:
        raise ModelRunError(str(err)) from None
    options = dataclasses.replace(options, spec=f"{file}:{factory}" if factory else str(file))
    out = options.out
    output_folder(out)
    say = _recorded(say, out / "events.jsonl")
    manifest = extract(options, file, say)
    say(summary.profile_table(manifest))
    for line in summary.skipped_lines(manifest):
        say(line)
    if options.extract_only:
        return summary.write(out, manifest, [], None)
    lines = optimize_tasks(options, manifest, say)
    regions = assemble(out, manifest, lines)
    # with no region won: the baselines, and an empty patch
    e2e = measure(options, file, manifest, regions, say)
    kept = [regions[i] for i in e2e.get("kept", [])]
    patch_file.write(out, kept, summary.patch_header(manifest, regions, kept, e2e), e2e.get("whole_model"))
    result = summary.write(out, manifest, regions, e2e)
    if regions:
        say(summary.gains_table(regions, result))
    say(summary.e2e_table(result))
    say(
        f"done: {out / patch_file.PATCH_FILE} ({result['regions_kept']} regions), report {out / 'report.html'}"
    )
    return result


def _recorded(say: Say, events: Path) -> Say:
    """``say``, and each line of text also appended to ``events`` (what MCP's model_status
    and a following client read)."""

    def both(message: Any) -> None:
        say(message)
        if isinstance(message, str):
            with events.open("a") as fh:
                fh.write(json.dumps({"kind": "model_progress", "text": message}) + "\n")

    return both


def extract(options: ModelOptions, file: Path, say: Say) -> dict[str, Any]:
    """The manifest: from ``manifest.json`` when an earlier run wrote it, else from a worker."""
    saved = options.out / "manifest.json"
    if saved.is_file():
        manifest = json.loads(saved.read_text())
        if manifest.get("spec") == options.spec:
            say(f"regions: from {saved} (an earlier run)")
            return dict(manifest)
    say(f"capturing {options.spec} and profiling its regions ({options.settings.device})")
    job = {
        "mode": "model-extract",
        "model_spec": options.spec,
        "out": str(options.out.resolve()),
        "min_share": options.min_share,
        "max_regions": options.max_regions,
    }
    found = run_model_job(job, _eval(options), readable=[file.parent], writable=[options.out.resolve()])
    if "error" in found:
        _failed(f"{options.spec}: {found['error']}", found, options.out)
    found["spec"] = options.spec
    saved.write_text(json.dumps(found, indent=2))
    return dict(found)


def optimize_tasks(options: ModelOptions, manifest: dict[str, Any], say: Say) -> dict[str, dict[str, Any]]:
    """Each region's task through the optimize loop; its results.jsonl line, by task."""
    batch = options.out / "batch"
    batch.mkdir(exist_ok=True)
    done = {line["task"]: line for line in read_results(batch, warn=False)}
    tasks = [r for r in manifest["regions"] if r["task"]]
    budget = rounds_by_share(tasks, options.rounds)
    for region in tasks:
        key = Path(region["task"]).stem
        if key in done:
            say(f"{key}: done earlier ({done[key]['status']})")
            continue
        rounds = budget[region["task"]]
        say(
            f"{key}: {region['share']:.0%} of the time, {len(region['instances'])} instances: {rounds} rounds"
        )
        settings = options.settings.replace(rounds=rounds)
        entry = TaskEntry(key=key, path=(options.out / region["task"]).resolve(), level=None)
        # no confirmation: the end-to-end step measures each region again in the model, alone and together
        line = run_task(
            entry,
            BatchOptions(
                out=batch, settings=settings, policy=options.policy, confirm=False, families=options.families
            ),
        )
        append_line(batch, line)
        done[key] = line
        say(
            f"{key}: {line['status']}"
            + (f", {line['speedup_vs_eager']:.2f}x over eager" if line.get("speedup_vs_eager") else "")
        )
    return done


def rounds_by_share(regions: list[dict[str, Any]], total: int) -> dict[str, int]:
    """Rounds per task, in proportion to its share of the time, at least one each."""
    whole = sum(r["share"] for r in regions) or 1.0
    return {r["task"]: max(1, round(total * r["share"] / whole)) for r in regions}


def assemble(out: Path, manifest: dict[str, Any], lines: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The patch's regions: each task whose best beat eager, its candidate copied beside the
    patch. Region entries carry what :mod:`kforge.tools.model.patch` needs and the figures."""
    chosen = []
    (out / "candidates").mkdir(exist_ok=True)
    for region in manifest["regions"]:
        line = lines.get(Path(region["task"]).stem) if region["task"] else None
        if not line or line.get("status") != "ok" or (line.get("speedup_vs_eager") or 0) <= WIN:
            continue
        target = out / "candidates" / Path(region["task"]).name
        shutil.copyfile(line["best_path"], target)
        chosen.append(
            {
                "kind": region["kind"],
                "task": region["task"],
                "candidate": str(target.relative_to(out)),
                "instances": region["instances"],
                "inputs": region["inputs"],
                "fixed": region["fixed"],
                "shapes": region["shapes"],
                "groups": region.get("groups", {}),
                "share": region["share"],
                "strategy": line.get("best_strategy"),
                "speedup_vs_eager": line.get("speedup_vs_eager"),
                "speedup_vs_compile": line.get("speedup_vs_compile"),
            }
        )
    return chosen


def measure(
    options: ModelOptions, file: Path, manifest: dict[str, Any], regions: list[dict[str, Any]], say: Say
) -> dict[str, Any]:
    """The end-to-end figures of the patch (``e2e.json``). A measurement worker that dies (a
    CUDA fault is sticky: the process is lost) is started again without the regions most
    likely to blame, those replaying CUDA graphs of their own beside torch.compile's, down to
    an empty patch (the baselines alone); the regions left out say why."""
    say(
        f"measuring the patch end to end ({len(regions)} regions; eager, torch.compile {', '.join(options.compile_modes)})"
    )
    job = _measure_job(options, manifest)
    tries, dropped = attempts(regions, options.out), dict[str, str]()
    for attempt, used in enumerate(tries):
        figures = run_model_job(
            job | {"patch": [regions[i] for i in used]},
            _eval(options),
            readable=[file.parent, options.out.resolve()],
            writable=[],
        )
        if "log" not in figures or attempt + 1 == len(tries):  # figures, a verdict, or none left
            break
        log = options.out / f"worker-{attempt + 1}.log"
        log.write_text(str(figures["log"]))
        left_out = [i for i in used if i not in tries[attempt + 1]]
        reason = figures["error"].removeprefix("the model worker ")
        dropped |= {str(i): f"the measurement worker died with it in the patch ({reason})" for i in left_out}
        names = ", ".join(regions[i]["instances"][0] for i in left_out)
        say(f"{figures['error']} (its log: {log}); measuring again without {names}")
    if "error" in figures:
        _failed(f"end-to-end measurement: {figures['error']}", figures, options.out)
    figures = renumbered(dict(figures), used) | {"dropped": dropped}
    (options.out / "e2e.json").write_text(json.dumps(figures, indent=2))
    return figures


def _measure_job(options: ModelOptions, manifest: dict[str, Any]) -> dict[str, Any]:
    """The end-to-end job, but for its regions (``patch``)."""
    cuda = options.settings.device == "cuda"
    return {
        "mode": "model-measure",
        "model_spec": options.spec,
        "root": str(options.out.resolve()),
        "compile_modes": [m for m in options.compile_modes if cuda or m == "default"],
        "whole_modes": [m for m in options.whole_modes if cuda or m == "default"],
        "trials": options.trials,
        "profile_paths": [path for r in manifest["regions"] for path in r["instances"]],
    }


def attempts(regions: list[dict[str, Any]], out: Path) -> list[list[int]]:
    """The regions of each measurement, tried in order until one worker lives: all of them;
    then the ones that replay no CUDA graph plus the largest that does; those alone; none."""
    everything = list(range(len(regions)))
    graphs = [i for i in everything if replays_graphs(regions[i], out)]
    plain = [i for i in everything if i not in graphs]
    largest = sorted(plain + [max(graphs, key=lambda i: regions[i]["share"])]) if graphs else plain
    found: list[list[int]] = []
    for used in (everything, largest, plain, []):
        if used not in found:
            found.append(used)
    return found


def renumbered(figures: dict[str, Any], used: list[int]) -> dict[str, Any]:
    """Figures measured on the regions ``used`` (a subset), by the regions' own numbers."""
    figures["kept"] = [used[i] for i in figures.get("kept", [])]
    figures["alone"] = {str(used[int(k)]): v for k, v in figures.get("alone", {}).items()}
    return figures


def _failed(message: str, found: dict[str, Any], out: Path) -> NoReturn:
    """Raise the worker's error; its log (when it died without a result) is kept in
    ``worker.log`` and its tail goes with the message."""
    log = str(found.get("log") or "")
    if log:
        (out / "worker.log").write_text(log)
        tail = "\n".join(log.rstrip().splitlines()[-12:])
        message += f"\n{tail}\n(the whole log: {out / 'worker.log'})"
    raise ModelRunError(message)


def _eval(options: ModelOptions) -> Any:
    return dataclasses.replace(
        eval_options(options.settings), timeout_s=max(options.settings.eval_timeout_s, 900.0)
    )
