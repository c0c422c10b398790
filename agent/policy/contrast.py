"""Contrastive selection and formatting of previous attempts for prompts.

Following Contrastive-RL, the model sees measured variants across levels of performance,
not only the best: the fastest, the median and the slowest verified candidates, and
failures with their error text, each with its measured figures.
"""

from __future__ import annotations

import dataclasses

from ...tools.fmt import num
from ...tools.profile import describe_ncu
from ...tools.result import Result, Status
from .base import AttemptView


@dataclasses.dataclass
class Labelled:
    view: AttemptView
    label: str


def _speed(view: AttemptView) -> float:
    speedup = view.result.speedup_vs_eager
    if speedup is not None:
        return speedup
    ms = view.result.candidate_ms
    return 1.0 / ms if ms else 0.0


def select_contrastive(attempts: list[AttemptView], cap: int = 6, max_failures: int = 3) -> list[Labelled]:
    """Up to ``cap`` attempts across levels: fastest, median, slowest verified, and the latest
    failures (distinct statuses first). Returned in the order they were made."""
    verified = sorted((a for a in attempts if a.result.status is Status.OK), key=_speed, reverse=True)
    chosen: dict[str, str] = {}
    if verified:
        chosen[verified[0].attempt_id] = "fastest verified"
        picks = [(len(verified) // 2, "median verified"), (len(verified) - 1, "slowest verified")]
        for index, label in picks:
            chosen.setdefault(verified[index].attempt_id, label)
        for extra in verified[1:]:
            if len(chosen) >= max(cap - max_failures, 3):
                break
            chosen.setdefault(extra.attempt_id, "verified")
    failures = [a for a in reversed(attempts) if a.result.status is not Status.OK]
    distinct: list[AttemptView] = []
    rest: list[AttemptView] = []
    seen: set[Status] = set()
    for failure in failures:
        (rest if failure.result.status in seen else distinct).append(failure)
        seen.add(failure.result.status)
    ordered = distinct + rest
    for failure in ordered:
        if len(chosen) >= cap or sum(1 for v in chosen.values() if v == "failed") >= max_failures:
            break
        chosen[failure.attempt_id] = "failed"
    return [Labelled(a, chosen[a.attempt_id]) for a in attempts if a.attempt_id in chosen]


def figures(result: Result) -> str:
    """One line of measured figures."""
    parts = [f"status {result.status.value}"]
    if result.status is Status.OK:
        parts.append(f"speedup vs eager {num(result.speedup_vs_eager, 'x', 3)}")
        parts.append(f"vs torch.compile {num(result.speedup_vs_compile, 'x', 3)}")
        parts.append(f"candidate {num(result.candidate_ms, ' ms')}, eager {num(result.eager_ms, ' ms')}")
        if result.roofline_fraction is not None and result.roofline is not None:
            parts.append(f"{result.roofline_fraction:.0%} of the {result.roofline.bound}-bound floor")
        if result.max_abs_err is not None:
            parts.append(f"max abs err {result.max_abs_err:.2e}")
    if result.timing_label:
        parts.append(f"timed by {result.timing_label}")
    if result.cheats:
        parts.append(f"cheats: {', '.join(result.cheats)}")
    if result.ncu:
        parts.append(f"ncu: {describe_ncu(result.ncu)}")
    return "; ".join(parts)


def format_attempt(item: Labelled, code_chars: int = 4000, log_chars: int = 1200) -> str:
    view = item.view
    lines = [
        f"### {view.attempt_id} (round {view.round}, {item.label}, {view.strategy})",
        figures(view.result),
    ]
    if view.result.status is not Status.OK and view.result.log:
        lines.append("error:\n```\n" + view.result.log.strip()[-log_chars:] + "\n```")
    if view.source:
        code = view.source if len(view.source) <= code_chars else view.source[:code_chars] + "\n# ... (cut)"
        lines.append("```python\n" + code.rstrip() + "\n```")
    return "\n".join(lines)


def format_attempts(items: list[Labelled]) -> str:
    if not items:
        return "(none yet: this is the first round)"
    return "\n\n".join(format_attempt(item) for item in items)
