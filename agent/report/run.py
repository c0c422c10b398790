"""A run's ``report.html``: every attempt with its measured figures, the analyses, its
syntax-highlighted code and its diff from the reference (pygments, inline styles)."""

from __future__ import annotations

import difflib
import html
import json
from pathlib import Path

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer, PythonLexer

from ..policy.contrast import figures
from ..policy.render import baseline_summary
from ..state import BASELINE_ID
from ..store import Trajectory, TrajectoryStep, TrajectoryStore
from .markdown import batch_choice, best_step
from .page import cell, fmt, page

FORMATTER = HtmlFormatter(noclasses=True, style="default")


def code_html(source: str) -> str:
    return highlight(source, PythonLexer(), FORMATTER)


def diff_html(reference: str, source: str) -> str:
    diff = difflib.unified_diff(
        reference.splitlines(keepends=True), source.splitlines(keepends=True), "reference", "candidate"
    )
    text = "".join(diff)
    return highlight(text, DiffLexer(), FORMATTER) if text else "<p>identical to the reference</p>"


def _text(title: str, text: str) -> list[str]:
    return (
        [f"<p><b>{html.escape(title)}</b></p><pre>{html.escape(text.strip())}</pre>"] if text.strip() else []
    )


def _attempt(step: TrajectoryStep, reference: str) -> list[str]:
    a, r = step.attempt, step.result
    out = [
        f'<h3 id="{html.escape(a.attempt_id)}">{html.escape(a.attempt_id)}: {html.escape(a.strategy)}</h3>'
    ]
    out.append(f"<p>{html.escape(figures(r)) if r is not None else 'not evaluated'}</p>")
    out += _text("Performance analysis", a.analysis) + _text("Plan", a.plan)
    if r is not None and r.log and r.status.value != "ok":
        out += _text("Log (end)", r.log[-2000:])
    if a.source:
        out += [
            "<details open><summary>code</summary>",
            code_html(a.source),
            "</details>",
            "<details><summary>diff from the reference</summary>",
            diff_html(reference, a.source),
            "</details>",
        ]
    elif a.raw:
        out += [
            "<details><summary>unparsed answer</summary>",
            f"<pre>{html.escape(a.raw[:4000])}</pre></details>",
        ]
    return out


def _attempt_table(steps: list[TrajectoryStep]) -> list[str]:
    head = ["attempt", "round", "strategy", "status", "vs eager", "vs compile", "ms", "of roofline"]
    rows = [
        '<table class="sortable"><thead><tr>'
        + "".join(f"<th>{h}</th>" for h in head)
        + "</tr></thead><tbody>"
    ]
    for step in steps:
        a, r = step.attempt, step.result
        ok = r is not None and r.status.value == "ok"
        cells = [
            f'<td data-v="{html.escape(a.attempt_id)}"><a href="#{html.escape(a.attempt_id)}">'
            f"{html.escape(a.attempt_id)}</a></td>",
            cell(a.round),
            cell(a.strategy),
            cell(r.status.value if r else "not evaluated", css="ok" if ok else "bad"),
            cell(fmt(r.speedup_vs_eager if r else None), (r.speedup_vs_eager if r else None) or 0),
            cell(fmt(r.speedup_vs_compile if r else None), (r.speedup_vs_compile if r else None) or 0),
            cell(fmt(r.candidate_ms if r else None, "", 4), (r.candidate_ms if r else None) or 0),
            cell(f"{r.roofline_fraction:.0%}" if r and r.roofline_fraction else "-",
                  (r.roofline_fraction if r else None) or 0),
        ]  # fmt: skip
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return rows + ["</tbody></table>"]


def _trajectory(trajectory: Trajectory, reference: str, chosen: str | None) -> list[str]:
    best = best_step(trajectory.steps, chosen)
    best_text = (
        f"{best.attempt.attempt_id} at {fmt(best.result.speedup_vs_eager if best.result else None)}"
        if best
        else "no verified candidate"
    )
    out = [f"<p>Task <code>{html.escape(trajectory.task_name)}</code>; best: {html.escape(best_text)}</p>"]
    out += _attempt_table(trajectory.steps)
    out += ["<h2>Reference</h2>", "<details><summary>code</summary>", code_html(reference), "</details>"]
    for round in sorted({s.attempt.round for s in trajectory.steps} | set(trajectory.analyses)):
        out.append(f"<h2>Round {round}</h2>")
        for step in (s for s in trajectory.steps if s.attempt.round == round):
            out += _attempt(step, reference)
        notes = trajectory.analyses.get(round, {})
        out += _text("Critic's analysis", notes.get("critic", "")) + _text("Plan", notes.get("plan", ""))
    return out


def render_run(run_dir: Path) -> str:
    meta = json.loads((run_dir / "run.json").read_text())
    run_id = meta["run_id"]
    reference = (run_dir / meta["task"]).read_text()
    store = TrajectoryStore(run_dir / "trajectories.db")
    try:
        info = store.run_info(run_id) or {}
        baseline = store.results(run_id).get(BASELINE_ID)
        body = [
            f"<h1>kforge run {html.escape(run_id)}</h1>",
            f"<p>Policy {html.escape(str(info.get('policy', '-')))}, model {html.escape(str(info.get('model') or '-'))};"
            f" status {html.escape(str(info.get('status', '-')))}: {html.escape(str(info.get('reason') or '-'))}</p>",
            f"<p>Baseline: {html.escape(baseline_summary(baseline))}</p>",
        ]
        chosen = batch_choice(store, run_id)
        for trajectory in store.trajectories(run_id):
            body += _trajectory(trajectory, reference, chosen)
    finally:
        store.close()
    return page(f"kforge run {run_id}", body)
