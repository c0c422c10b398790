"""``report.html``: one self-contained page (inline CSS, JS and PNG plots, nothing fetched)
for a batch folder or a run folder. A batch's page has the summary table, the speedup
distribution per level, fast_p curves, the roofline scatter and a sortable per-task table
linking each task's best source, analysis and attempts; a run's page is in ``run``."""

from __future__ import annotations

import html
import os
import urllib.parse
from pathlib import Path
from typing import Any

from ..batch.summary import P_VALUES, read_lines, summary
from .page import cell, fmt, page
from .plots import fast_p_curves, roofline_scatter, speedup_distribution

REPORT = "report.html"


def _summary_table(groups: dict[str, dict[str, Any]]) -> list[str]:
    head = ["group", "valid", "correct", "fast_1 / 1.5 / 2 vs eager", "fast_1 / 1.5 / 2 vs compile",
            "geomean vs eager", "geomean vs compile", "torch.compile vs eager", "rejected attempts", "time"]  # fmt: skip
    rows = ["<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"]
    for name, s in groups.items():
        fast = [
            " / ".join(fmt(s[k][str(p)], "", 2) for p in P_VALUES)
            for k in ("fast_vs_eager", "fast_vs_compile")
        ]
        cells = [f"{name} ({s['tasks']})", s["valid_tasks"], fmt(s["correct_rate"], "", 2), *fast,
                 fmt(s["geomean_vs_eager"]), fmt(s["geomean_vs_compile"]), fmt(s["compile_geomean_vs_eager"]),
                 s["rejected_attempts"], f"{s['time_s'] / 60:.1f} min"]  # fmt: skip
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return rows + ["</tbody></table>"]


def _link(target: str | None, base: Path, text: str) -> str:
    if not target or not Path(target).exists():
        return ""
    return f'<a href="{html.escape(urllib.parse.quote(os.path.relpath(target, base)))}">{text}</a>'


def _task_row(line: dict[str, Any], base: Path) -> str:
    result, run_dir = line.get("result") or {}, line.get("run_dir")
    fraction = result.get("roofline_fraction")
    ok = line["status"] == "ok"
    links = " ".join(
        x
        for x in (
            _link(line.get("best_path"), base, "source"),
            _link(str(Path(run_dir) / "report.md") if run_dir else None, base, "analysis"),
            _link(str(Path(run_dir) / REPORT) if run_dir else None, base, "attempts"),
        )
        if x
    )
    attempts = ", ".join(f"{k} {v}" for k, v in sorted((line.get("attempts") or {}).items()))
    cells = [
        cell(line["task"]),
        cell(line.get("level") if line.get("level") is not None else "-", line.get("level") or 0),
        cell(line["status"], css="ok" if ok else "bad", title=line.get("error") or ""),
        cell(fmt(line.get("speedup_vs_eager")), line.get("speedup_vs_eager") or 0),
        cell(fmt(line.get("speedup_vs_compile")), line.get("speedup_vs_compile") or 0),
        cell(line.get("best_strategy") or "-"),
        cell(f"{fraction:.0%}" if fraction else "-", fraction or 0),
        cell(attempts or "-", sum((line.get("attempts") or {}).values())),
        cell(f"{line.get('elapsed_s', 0.0):.0f} s", line.get("elapsed_s", 0.0)),
        f"<td>{links}</td>",
    ]
    return "<tr>" + "".join(cells) + "</tr>"


def _task_table(lines: list[dict[str, Any]], base: Path) -> list[str]:
    head = ["task", "level", "status", "vs eager", "vs compile", "best strategy", "of roofline", "attempts",
            "time", "links"]  # fmt: skip
    return [
        '<table class="sortable" id="tasks"><thead><tr>'
        + "".join(f"<th>{h}</th>" for h in head)
        + "</tr></thead>",
        "<tbody>",
        *(_task_row(line, base) for line in lines),
        "</tbody></table>",
    ]


def _plots(lines: list[dict[str, Any]]) -> list[str]:
    drawn = [
        (speedup_distribution(lines), "speedup distribution per level"),
        (fast_p_curves(lines), "fast_p against eager and torch.compile"),
        (roofline_scatter(lines), "roofline: fraction of the floor against arithmetic intensity"),
    ]
    figures = [
        f'<figure><img class="plot" src="{uri}" alt="{caption}"><figcaption>{caption}</figcaption></figure>'
        for uri, caption in drawn
        if uri
    ]
    return ['<div class="plots">', *figures, "</div>"] if figures else ["<p>No verified task to plot.</p>"]


def render_batch(folder: Path, base: Path) -> str:
    lines = read_lines(folder)
    groups = summary(lines)
    body = [
        f"<h1>kforge batch {html.escape(folder.resolve().name)}</h1>",
        f'<p class="small">{len(lines)} tasks from {html.escape(str(folder))}. fast_p: fraction of valid tasks'
        " that are correct and more than p times faster; geometric means over correct tasks.</p>",
        "<h2>Summary</h2>",
        *_summary_table(groups),
        "<h2>Plots</h2>",
        *_plots(lines),
        '<h2>Tasks</h2><p class="small">Click a column to sort.</p>',
        *_task_table(lines, base),
    ]
    return page(f"kforge batch {folder.name}", body)


def write_report(path: Path) -> Path:
    """Write ``report.html`` into a batch folder (results.jsonl) or a run folder (run.json)."""
    if (path / "results.jsonl").is_file():
        text = render_batch(path, path)
    elif (path / "run.json").is_file():
        from .run import render_run

        text = render_run(path)
    else:
        raise FileNotFoundError(f"{path}: neither a batch folder (results.jsonl) nor a run folder (run.json)")
    target = path / REPORT
    target.write_text(text)
    return target
