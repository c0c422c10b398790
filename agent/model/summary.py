"""What ``kforge model`` shows and writes: the profile table, the end-to-end table, the
patch's header, ``summary.json``/``summary.md`` and ``report.html`` (the time breakdown
before and after as a chart, per-region gains, the patch and the diff it makes)."""

from __future__ import annotations

import difflib
import html
import io
import json
from pathlib import Path
from typing import Any

from rich.table import Table

from ...tools.fmt import ms, ratio
from ...tools.model.patch import PATCH_FILE


def profile_table(manifest: dict[str, Any]) -> Table:
    device = manifest.get("device", "cpu")
    clock = "GPU time" if manifest.get("forward_device_ms") else "host time"
    table = Table(title=f"{manifest['model']}: regions by share of the forward's {clock} ({device})")
    for column in ("region", "kind", "instances", "share", "host ms", "GPU ms", "task"):
        table.add_column(
            column, justify="right" if column in ("instances", "share", "host ms", "GPU ms") else "left"
        )
    for r in manifest["regions"]:
        table.add_row(
            r["path"] or "(whole model)",
            r["kind"],
            str(len(r["instances"])),
            f"{r['share']:.1%}",
            ms(r["host_ms"], 3),
            ms(r["device_ms"], 3) if manifest.get("forward_device_ms") else "-",
            Path(r["task"]).name if r["task"] else r["note"],
        )
    return table


def skipped_lines(manifest: dict[str, Any]) -> list[str]:
    """One line per kind of module that could not be captured, with the reason."""
    by_reason: dict[tuple[str, str], list[str]] = {}
    for s in manifest.get("skipped", []):
        by_reason.setdefault((s["kind"], s["reason"]), []).append(s["path"] or "(whole model)")
    return [
        f"not captured: {kind} ({', '.join(paths[:3])}{', ...' if len(paths) > 3 else ''}): {reason}; "
        "its layers were taken instead"
        for (kind, reason), paths in by_reason.items()
    ]


def predicted(regions: list[dict[str, Any]]) -> float | None:
    """The model's speedup if each region's gain on its own held in the model (Amdahl)."""
    if not regions:
        return None
    saved = sum(r["share"] * (1 - 1 / r["speedup_vs_eager"]) for r in regions if r.get("speedup_vs_eager"))
    return 1 / (1 - saved) if saved < 1 else None


def figures(
    manifest: dict[str, Any], regions: list[dict[str, Any]], e2e: dict[str, Any] | None
) -> dict[str, Any]:
    kept = [regions[i] for i in (e2e or {}).get("kept", [])]
    times = (e2e or {}).get("times_ms", {})
    whole = (e2e or {}).get("whole_model")
    fallback = (e2e or {}).get("fallback")  # the patch is torch.compile of the model as it is
    chosen = f"compile:{whole}" if fallback else f"patched+compile:{whole}" if whole else "patched"
    eager, patched = times.get("eager"), times.get(chosen)
    compiled = {k.removeprefix("compile:"): v for k, v in times.items() if k.startswith("compile:")}
    best_compile = min(compiled.values()) if compiled else None
    return {
        "model": manifest["model"],
        "spec": manifest.get("spec"),
        "device": (e2e or {}).get("device", manifest.get("device")),
        "regions_found": len(manifest["regions"]),
        "regions_won": len(regions),
        "regions_kept": len(kept),
        "eager_ms": eager,
        "patched_ms": patched,
        "compile_ms": compiled,
        "speedup_vs_eager": eager / patched if eager and patched else None,
        "speedup_vs_best_compile": best_compile / patched if best_compile and patched else None,
        "predicted_speedup": predicted(kept),
        "predicted_won": predicted(regions),
        "verified": (e2e or {}).get("verified"),
        "alone": (e2e or {}).get("alone", {}),
        "together": (e2e or {}).get("together"),  # every region won swapped at once, over eager
        "kept": (e2e or {}).get("kept", []),
        "dropped": (e2e or {}).get("dropped", {}),  # left out of the measurement: why
        "whole_model": whole,
        "fallback": fallback,
        "patched_variants": {k: v for k, v in times.items() if k.startswith("patched")},
    }


def e2e_table(result: dict[str, Any]) -> Table:
    table = Table(title=f"{result['model']} end to end ({result['device']}): one run, interleaved")
    table.add_column("variant")
    table.add_column("ms", justify="right")
    table.add_column("patch's speedup over it", justify="right")
    patched = result.get("patched_ms")
    rows = [("eager", result.get("eager_ms"))] + [
        (f"torch.compile {m}", v) for m, v in result["compile_ms"].items()
    ]
    for name, value in rows:
        table.add_row(name, ms(value, 3), ratio(value / patched) if value and patched else "-")
    for name, value in result.get("patched_variants", {}).items():
        label = "kforge patch" + (f", then torch.compile {name.split(':')[1]}" if ":" in name else "")
        chosen = " (chosen)" if value == patched else ""
        table.add_row(label, ms(value, 3), f"{result['regions_kept']} regions{chosen}")
    table.caption = (
        f"{result['regions_won']} regions beat eager alone; had their gains held in the model: "
        f"{ratio(result.get('predicted_won'))} over eager"
        + (f"; the patch is {result['fallback']}" if result.get("fallback") else "")
    )
    return table


def gains_table(regions: list[dict[str, Any]], result: dict[str, Any]) -> Table:
    """Each region that beat eager on its own: its gain as a task, and alone in the model."""
    table = Table(title="regions that won as tasks: their gain there, and alone in the model")
    for column in (
        "region",
        "kind",
        "share",
        "strategy",
        "task vs eager",
        "task vs compile",
        "in the model",
        "kept",
    ):
        table.add_column(column)
    for i, r in enumerate(regions):
        alone = result.get("alone", {}).get(str(i))
        table.add_row(
            r["instances"][0], r["kind"], f"{r['share']:.1%}", str(r.get("strategy") or "-"),
            ratio(r.get("speedup_vs_eager")), ratio(r.get("speedup_vs_compile")), ratio(alone),
            "yes" if i in result.get("kept", []) else _dropped(result, i) or "no",
        )  # fmt: skip
    together = result.get("together")
    notes = [f"all {len(regions)} together in the model: {ratio(together)} over eager"] if together else []
    notes += [f"{regions[int(i)]['instances'][0]}: {why}" for i, why in result.get("dropped", {}).items()]
    table.caption = "; ".join(notes) or None
    return table


def _dropped(result: dict[str, Any], i: int) -> str | None:
    return "no: left out (below)" if str(i) in result.get("dropped", {}) else None


def patch_header(
    manifest: dict[str, Any],
    regions: list[dict[str, Any]],
    kept: list[dict[str, Any]],
    e2e: dict[str, Any] | None,
) -> str:
    result = figures(manifest, regions, e2e)
    head = f"kforge patch for {manifest['model']} ({result['device']})."
    if result.get("whole_model"):
        head += f" Then the whole model goes through torch.compile(mode={result['whole_model']!r}), which measured fastest."
    if not kept and not result.get("whole_model"):
        return (
            head
            + "\n\nEmpty: no region's replacement made the model faster end to end, so nothing is swapped."
        )
    lines = [
        head,
        "",
        f"End to end: {ratio(result['speedup_vs_eager'])} over eager, "
        f"{ratio(result['speedup_vs_best_compile'])} over the best torch.compile mode "
        f"(predicted from the regions: {ratio(result['predicted_speedup'])}).",
        "",
        "Regions replaced:",
    ]
    if not kept:
        lines.append(
            f"  none: {e2e.get('fallback') if e2e and e2e.get('fallback') else 'the whole model compiled is the patch'}"
        )
    for r in kept:
        lines.append(
            f"  {r['instances'][0]} ({r['kind']}, {len(r['instances'])} instances, {r['share']:.0%} of the time): "
            f"{r['strategy']}, {ratio(r['speedup_vs_eager'])} over eager on the region; {r['candidate']}"
        )
    return "\n".join(lines)


def write(
    out: Path, manifest: dict[str, Any], regions: list[dict[str, Any]], e2e: dict[str, Any] | None
) -> dict[str, Any]:
    result = figures(manifest, regions, e2e)
    (out / "summary.json").write_text(json.dumps(result, indent=2))
    (out / "summary.md").write_text(markdown(result, manifest))
    (out / "report.html").write_text(report(out, result, manifest, regions, e2e))
    return result


def markdown(result: dict[str, Any], manifest: dict[str, Any]) -> str:
    lines = [f"# {result['model']} ({result['device']})", "", "| variant | ms |", "| --- | --- |"]
    lines.append(f"| eager | {ms(result['eager_ms'], 3)} |")
    lines += [f"| torch.compile {m} | {ms(v, 3)} |" for m, v in result["compile_ms"].items()]
    lines.append(f"| kforge patch ({result['regions_kept']} regions) | {ms(result['patched_ms'], 3)} |")
    lines += ["", "| region | kind | instances | share | task |", "| --- | --- | --- | --- | --- |"]
    for r in manifest["regions"]:
        lines.append(
            f"| {r['path']} | {r['kind']} | {len(r['instances'])} | {r['share']:.1%} | {r['task'] or r['note']} |"
        )
    return "\n".join(lines) + "\n"


def breakdown(manifest: dict[str, Any], e2e: dict[str, Any] | None) -> list[tuple[str, float, float | None]]:
    """(region, ms before, ms after) of each region, one forward, from the profiles taken
    before (extraction) and after (the patched model, not compiled); GPU time on a GPU."""
    after = (e2e or {}).get("after", {}).get("regions", {})
    gpu = bool(manifest.get("forward_device_ms"))
    rows = []
    for r in manifest["regions"]:
        before = r["device_ms"] if gpu else r["host_ms"]
        times = [after[p][1 if gpu else 0] for p in r["instances"] if p in after]
        rows.append((r["path"] or "(whole model)", before, sum(times) if times else None))
    return rows


def breakdown_chart(manifest: dict[str, Any], e2e: dict[str, Any] | None) -> str:
    """The time by region before and after the patch, as stacked bars (a PNG data URI), or
    "" without the profile after."""
    rows = [row for row in breakdown(manifest, e2e) if row[2] is not None][:10]
    whole = (e2e or {}).get("after", {}).get("forward")
    if not rows or not whole:
        return ""
    from ..report.plots import _data_uri, _figure

    gpu = bool(manifest.get("forward_device_ms"))
    totals = {
        "before": manifest["forward_device_ms" if gpu else "forward_host_ms"],
        "after": whole[1 if gpu else 0],
    }
    fig, ax = _figure((7.0, 2.8))
    colors = [f"C{i}" for i in range(len(rows))]
    for y, side in ((1, "before"), (0, "after")):
        left = 0.0
        for (name, before, after), color in zip(rows, colors, strict=True):
            width = before if side == "before" else (after or 0.0)
            ax.barh(y, width, left=left, color=color, label=name if side == "before" else None)
            left += width
        ax.barh(
            y,
            max(totals[side] - left, 0.0),
            left=left,
            color="#ccc",
            label="the rest" if side == "before" else None,
        )
    ax.set_yticks([0, 1], ["patched", "eager"])
    ax.set_xlabel(
        f"ms per forward, profiled ({'GPU' if gpu else 'host'} time; the patch without torch.compile)"
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _data_uri(fig)


def report(
    out: Path,
    result: dict[str, Any],
    manifest: dict[str, Any],
    regions: list[dict[str, Any]],
    e2e: dict[str, Any] | None,
) -> str:
    from ..report.page import page

    body = [f"<h1>{html.escape(result['model'])} ({html.escape(str(result['device']))})</h1>"]
    body.append(f"<pre>{html.escape(_plain(e2e_table(result)))}</pre>")
    chart = breakdown_chart(manifest, e2e)
    if chart:
        body.append(f'<img alt="time by region" src="{chart}">')
    body.append(f"<pre>{html.escape(_plain(profile_table(manifest)))}</pre>")
    if regions:
        body.append(f"<pre>{html.escape(_plain(gains_table(regions, result)))}</pre>")
    patch = out / PATCH_FILE
    if patch.is_file():
        body += ["<h2>The patch</h2>", f"<pre>{html.escape(patch.read_text())}</pre>"]
    for r in regions:
        task, cand = out / r["task"], out / r["candidate"]
        if task.is_file() and cand.is_file():
            diff = difflib.unified_diff(
                task.read_text().splitlines(),
                cand.read_text().splitlines(),
                r["task"],
                r["candidate"],
                lineterm="",
            )
            body += [f"<h2>{html.escape(r['instances'][0])}: the region and its replacement</h2>"]
            body.append(f"<pre>{html.escape(chr(10).join(diff))}</pre>")
    return page(f"kforge model: {result['model']}", body)


def _plain(table: Table) -> str:
    from rich.console import Console

    console = Console(width=140, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text()
