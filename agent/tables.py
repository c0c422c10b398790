"""A Result as a rich table, for ``kforge eval`` and the chat. Every value is plain ``Text``:
names, cheats, notes and logs come from the task, the candidate or its worker and are never
read as rich markup."""

from __future__ import annotations

import json

from rich.table import Table
from rich.text import Text

from ..tools.fmt import ratio
from ..tools.precision import PRECISIONS
from ..tools.result import Result


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f} ms"


def result_table(task_name: str, candidate_name: str, result: Result) -> Table:
    """The result as a two-column table. Every value is plain ``Text``: names, cheats, notes and
    logs come from the task, the candidate or its worker and are never read as rich markup."""
    colour = {"ok": "green", "rejected": "red", "incorrect": "red"}.get(result.status.value, "yellow")
    table = Table(title=Text(f"{candidate_name} on {task_name}"), show_header=False)
    table.add_row("status", Text(result.status.value, style=colour))
    for label, value in _result_rows(result):
        table.add_row(label, Text(value))
    return table


def _result_rows(result: Result) -> list[tuple[str, str]]:
    rows = [("backend / precision", f"{result.backend} / {result.precision}")]
    if result.cheats:
        rows.append(("cheats", "\n".join(result.cheats)))
    if result.trials:
        rows.append(("correct", f"{result.correct} over {result.trials} trials"))
        rows.append(("max abs / rel error", f"{result.max_abs_err:.2e} / {result.max_rel_err:.2e}"))
        if result.correct and result.precision in PRECISIONS:  # a large relative error can be fine
            tol = PRECISIONS[result.precision]
            rows.append(
                (
                    "tolerance",
                    f"|out - ref| <= {tol.atol:g} + {tol.rtol:g} * |ref| elementwise ({result.precision});"
                    " relative error is large only where the reference is near zero",
                )
            )
    if result.fp64_rel_err is not None:
        rows.append(
            (
                "error vs float64 (candidate / reference)",
                f"{result.fp64_rel_err:.2e} / {result.ref_fp64_rel_err or 0:.2e}",
            )
        )
    if result.candidate:
        spread = f" (IQR {result.candidate.spread:.1%}, {result.candidate.trials} runs)"
        rows.append(("candidate", _ms(result.candidate_ms) + spread))
        rows.append(("eager", _ms(result.eager_ms)))
        compiled = (
            _ms(result.compile_ms)
            if result.compiled
            else f"not timed on {result.device} (--compile-baseline)"
        )
        rows.append(("torch.compile", compiled))
        rows.append(
            (
                "speedup vs eager / compile",
                f"{ratio(result.speedup_vs_eager)} / {ratio(result.speedup_vs_compile)}",
            )
        )
        rows.append(("timing", result.timing_label))
    if result.roofline:
        roof, fraction = result.roofline, result.roofline_fraction
        at = f", at {fraction:.0%} of it" if fraction is not None else ""
        rows.append(
            ("roofline", f"{roof.bound}-bound, floor {_ms(roof.floor_ms)} on {roof.gpu or 'unknown GPU'}{at}")
        )
    rows += [("note", flag) for flag in result.flags]
    if result.ncu:
        rows.append(("ncu", json.dumps(result.ncu)))
    if result.sanitizer:
        rows.append(("compute-sanitizer", json.dumps(result.sanitizer)))
    if result.status.value != "ok" and result.log:
        rows.append(("log", result.log[-1500:]))
    return rows
