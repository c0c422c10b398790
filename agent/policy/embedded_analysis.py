"""The embedded policy's critic and planner text, written from the measurements alone: which
variant won and by how much, where it sits on the roofline, what failed and why."""

from __future__ import annotations

import re

from ...tools.fmt import ms, ratio
from ...tools.result import Result, Status
from .base import AttemptView
from .features import TaskFeatures


def _compiled(value: float | None) -> str:
    return ms(value) if value is not None else "not timed"


def position(features: TaskFeatures) -> str:
    """The task's roofline position in one line."""
    where = (
        f"on an {features.gpu} (assumed: no GPU figures here)"
        if features.gpu_assumed
        else f"on {features.gpu}"
    )
    floor = f"floor {ms(features.floor_ms)} {where}" if features.floor_ms is not None else "floor unknown"
    measured = f" (measured on {features.measured_on})" if features.measured_on else ""
    kind = "launch-bound" if features.launch_bound else f"{features.bound}-bound"
    ops = f"{features.launches} kernel-launching ops" if features.launches else "ops unknown"
    return (
        f"{kind}: {features.flops / 1e9:.3g} GFLOP, {features.min_bytes / 1e6:.3g} MB minimal traffic, "
        f"{floor}; {ops}; eager {ms(features.eager_ms)}, torch.compile {_compiled(features.compile_ms)}{measured}"
    )


def _bound_now(result: Result) -> str:
    fraction = result.roofline_fraction
    if result.roofline is None or fraction is None:
        return "roofline floor unknown on this device"
    gap = (
        "close to the limit"
        if fraction > 0.6
        else "far from the limit: launch overhead or poor kernels remain"
    )
    return f"{result.roofline.bound}-bound, at {fraction:.0%} of the roofline floor ({gap})"


ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception|Exit|Interrupt|TimeLimit)\b")
LOG_NOISE = ("containment:", "judge containment:", "phases:", "candidate worker")


def _reason_line(text: str) -> str:
    """The line that says why an attempt failed: the last exception's, else the last unindented
    line that is not the workers' containment report (which ends every log)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip() and not line.startswith(" ")]
    for line in reversed(lines):
        if ERROR_LINE.match(line):
            return line[:200]
    said = [line for line in lines if not line.startswith(LOG_NOISE)]
    return said[-1][:200] if said else "(no log)"


def analysis(new: list[AttemptView], baseline: Result | None, best_so_far: AttemptView | None) -> str:
    lines = ["## Performance analysis (embedded policy)", ""]
    if baseline is not None:
        lines.append(
            f"Reference: eager {ms(baseline.eager_ms)}, torch.compile {_compiled(baseline.compile_ms)}."
        )
    if not new:
        return "\n".join([*lines, "No candidates this round: every applicable strategy was tried."])
    verified = sorted(
        (v for v in new if v.result.status is Status.OK and v.result.candidate_ms is not None),
        key=lambda v: v.result.candidate_ms or 0.0,
    )
    for view in verified:
        r = view.result
        lines.append(
            f"- {view.attempt_id} {view.strategy}: {ms(r.candidate_ms)}, {ratio(r.speedup_vs_eager)} vs eager, "
            f"{ratio(r.speedup_vs_compile)} vs torch.compile"
        )
    if verified:
        win = verified[0]
        text = f"Winner: {win.strategy} ({win.attempt_id})"
        if len(verified) > 1 and verified[1].result.candidate_ms and win.result.candidate_ms:
            margin = verified[1].result.candidate_ms / win.result.candidate_ms
            text += f", {margin:.2f}x faster than the runner-up {verified[1].strategy}"
        lines += ["", text + f"; now {_bound_now(win.result)}."]
        if best_so_far is not None and best_so_far.attempt_id != win.attempt_id:
            lines.append(
                f"Best overall is still {best_so_far.strategy} ({ratio(best_so_far.result.speedup_vs_eager)})."
            )
    failed = [v for v in new if v.result.status is not Status.OK]
    for view in failed:
        reason = "; ".join(view.result.cheats) if view.result.cheats else _reason_line(view.result.log)
        lines.append(f"- failed {view.attempt_id} {view.strategy}: {view.result.status.value}: {reason}")
    return "\n".join(lines)


def plan_text(
    features: TaskFeatures, ordered: list[tuple[str, str]], notes: list[str], features_line: str
) -> str:
    lines = ["Embedded strategy plan.", f"Task: {position(features)}."]
    if features.random:
        lines.append(
            "The forward draws random numbers (active dropout): no candidate can reproduce it; skipped."
        )
    else:
        lines.append("Strategies, in the cost model's order:")
        lines += [f"{i + 1}. {name}: {note}" for i, (name, note) in enumerate(ordered)]
    lines += notes
    lines.append(features_line)
    return "\n".join(lines)
