"""A run's ``report.md``: every attempt with its result and the analyses, from the trajectory
store; and ``best_step``, the verified attempt a run reports as its best (a batch's choice
where a batch confirmed one: ``batch_choice``).

Every text in report.md that came from the task, a candidate, its worker or the policy goes
through ``md_text``: no raw HTML reaches the Markdown (the MCP server returns it as is)."""

from __future__ import annotations

from ...tools.fmt import num
from ...tools.result import Result, Status
from ..events import SLOWER_THAN_EAGER
from ..md_text import fenced, md_inline, md_prose
from ..policy.contrast import figures
from ..policy.render import baseline_summary
from ..state import BASELINE_ID
from ..store import TrajectoryStep, TrajectoryStore

SLOWER = f" ({SLOWER_THAN_EAGER})"


def best_step(steps: list[TrajectoryStep], chosen: str | None = None) -> TrajectoryStep | None:
    """The verified step with the highest speedup over eager; ``chosen``: the attempt a batch
    chose when it measured its finalists again (``batch_choice``), where it is one of them."""
    picked = [
        s for s in steps if s.attempt.attempt_id == chosen and s.result and s.result.status is Status.OK
    ]
    if picked:
        return picked[0]
    best: tuple[float, TrajectoryStep] | None = None
    for step in steps:
        result = step.result
        if result is None or result.status is not Status.OK or result.speedup_vs_eager is None:
            continue
        if best is None or result.speedup_vs_eager > best[0]:
            best = (result.speedup_vs_eager, step)
    return best[1] if best else None


def _row(step: TrajectoryStep) -> str:
    r = step.result
    which = f"| {md_inline(step.attempt.attempt_id)} | {md_inline(step.attempt.strategy)} |"
    if r is None:
        return f"{which} not evaluated | - | - | - | - |"
    roof = f"{r.roofline_fraction:.0%}" if r.roofline_fraction is not None else "-"
    return (
        f"{which} {r.status.value} | {num(r.speedup_vs_eager, 'x', 3)}"
        f" | {num(r.speedup_vs_compile, 'x', 3)} | {num(r.candidate_ms)} | {roof} |"
    )


def _details(step: TrajectoryStep) -> list[str]:
    a, r = step.attempt, step.result
    out = [
        f"#### {md_inline(a.attempt_id)}",
        "",
        md_inline(figures(r)) if r is not None else "not evaluated",
        "",
    ]
    if a.analysis:
        out += ["Performance analysis:", "", md_prose(a.analysis.strip()), ""]
    if a.plan:
        out += ["Plan:", "", md_prose(a.plan.strip()), ""]
    if r is not None and r.status is not Status.OK and r.log:
        out += [*fenced(r.log.strip()[-2000:], "text"), ""]
    if a.source:
        code = fenced(a.source.rstrip(), "python", literal=True)
        out += ["<details><summary>code</summary>", "", *code, "", "</details>", ""]
    elif a.raw:
        answer = fenced(a.raw.strip()[:4000], "text")
        out += ["<details><summary>unparsed answer</summary>", "", *answer, "", "</details>", ""]
    return out


def batch_choice(store: TrajectoryStore, run_id: str) -> str | None:
    """The attempt a batch confirmed (measured again and verified), which it reports as the
    run's best; None for a run no batch confirmed."""
    ok = [i for i, r in store.confirmations(run_id).items() if r.status is Status.OK]
    return ok[0] if len(ok) == 1 else None


def _figures(result: Result) -> str:
    return f"{num(result.speedup_vs_eager, 'x', 3)} vs eager, {num(result.speedup_vs_compile, 'x', 3)} vs torch.compile"


def _confirmed(store: TrajectoryStore, run_id: str, best: TrajectoryStep | None) -> list[str]:
    """The batch's re-measure of the best (new inputs, eager and torch.compile in the same
    window): the figure the batch reports, beside the search's best-of-several figure; and
    the finalists it chose that best among, as first measured again."""
    result = store.confirmations(run_id).get(best.attempt.attempt_id) if best else None
    if result is None:
        return []
    where = result.roofline.gpu if result.roofline and result.roofline.gpu else result.device
    out = [
        f"Confirmed by the batch on {md_inline(where)}: {result.status.value}, {_figures(result)} (measured"
        " again on new inputs, eager and torch.compile timed in the same window; the figure above is the"
        " best of the search's measurements, which favours a lucky one)",
        "",
    ]
    failed = {i: r for i, r in store.confirmations(run_id).items() if r.status is not Status.OK}
    if failed and result.status is Status.OK:  # the faster finalists it was measured in place of
        out += [
            "Measured once more before it, and not kept:",
            "",
            *(f"- {md_inline(i)}: {r.status.value} on the new inputs" for i, r in failed.items()),
            "",
        ]
    finalists = store.finalists(run_id)
    if len(finalists) > 1:
        out += [
            "Chosen among the search's finalists, each measured again (then the one chosen once more):",
            "",
            *(f"- {md_inline(i)}: {r.status.value}, {_figures(r)}" for i, r in finalists.items()),
            "",
        ]
    return out


def render_report(store: TrajectoryStore, run_id: str) -> str:
    info = store.run_info(run_id) or {}
    baseline: Result | None = store.results(run_id).get(BASELINE_ID)
    lines = [f"# kforge run {md_inline(run_id)}", ""]
    chosen = batch_choice(store, run_id)
    for trajectory in store.trajectories(run_id):
        best = best_step(trajectory.steps, chosen)
        lines += [
            f"Task: {md_inline(trajectory.task_name)} ({md_inline(trajectory.task_hash)});"
            f" policy {md_inline(str(info.get('policy', '-')))}, model {md_inline(str(info.get('model') or '-'))};"
            f" status {md_inline(str(info.get('status', '-')))}: {md_inline(str(info.get('reason') or '-'))}",
            "",
            f"Baseline: {md_inline(baseline_summary(baseline))}",
            "",
            f"Best: {md_inline(best.attempt.attempt_id)} at"
            f" {num(best.result.speedup_vs_eager if best.result else None, 'x', 3)}"
            + (SLOWER if best.result and (best.result.speedup_vs_eager or 0) < 1 else "")
            if best
            else "Best: no verified candidate",
            "",
        ]
        lines += _confirmed(store, run_id, best)
        rounds = sorted({s.attempt.round for s in trajectory.steps} | set(trajectory.analyses))
        for round in rounds:
            notes = trajectory.analyses.get(round, {})
            steps = [s for s in trajectory.steps if s.attempt.round == round]
            if round > 0 or steps:
                lines += [f"## Round {round}", ""]
            if steps:
                lines += [
                    "| attempt | strategy | status | vs eager | vs compile | ms | roofline |",
                    "|---" * 7 + "|",
                ]
                lines += [_row(s) for s in steps] + [""]
                for step in steps:
                    lines += _details(step)
            if "critic" in notes:
                lines += ["### Critic's analysis", "", md_prose(notes["critic"].strip()), ""]
            if "plan" in notes:
                lines += [
                    f"### Plan made after round {round}" if round else "## Plan",
                    "",
                    md_prose(notes["plan"].strip()),
                    "",
                ]
    return "\n".join(lines)
