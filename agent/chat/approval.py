"""Terminal answers to the graph's interrupts: the plan is shown and approved, edited or refused;
after a round (with ``settings.choose``) the ranked attempts are shown and one is chosen to
build the next round on.

``kforge chat`` and ``kforge optimize --approve/--choose`` both hand :func:`terminal_answers`
to ``run.optimize``, which resumes the graph with the answer (``Command(resume=...)``).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markdown import Markdown
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..policy.ranker_data import split_features
from ..run import InterruptHandler, RunStopped

QUESTION = "approve the plan? [Y]es / [e]dit / [n]o (stop here): "
EDIT_HINT = "edit the plan, then Esc Enter to accept"
SHOWN = 12  # ranked attempts shown at a choice


def terminal_answers(console: Console) -> InterruptHandler:
    def answer(payload: dict[str, Any]) -> Any:
        if payload.get("kind") == "plan":
            return _plan(console, payload)
        if payload.get("kind") == "choice":
            return _choice(console, payload)
        raise RunStopped(f"no answer known for a {payload.get('kind')!r} interrupt")

    return answer


def _plan(console: Console, payload: dict[str, Any]) -> str:
    from prompt_toolkit import prompt

    plan, machine = split_features(str(payload["plan"]))  # the features line stays, unshown

    def kept(text: str) -> str:
        return f"{text}\n{machine}" if machine else text

    title = "plan" if not payload.get("round") else f"new plan after round {payload['round']}"
    console.print(Panel(Markdown(plan), title=title, title_align="left"))
    while True:
        try:
            reply = prompt(QUESTION).strip().lower()
        except EOFError:  # Ctrl-D: no answer, the run stays at the plan
            raise RunStopped("plan not approved") from None
        if reply in ("", "y", "yes"):
            return kept(plan)
        if reply in ("n", "no", "/stop"):
            raise RunStopped("plan not approved")
        if reply in ("e", "edit"):
            console.print(f"[dim]{EDIT_HINT}[/]")
            edited = prompt("plan> ", default=plan, multiline=True).strip()
            console.print(Panel(Markdown(edited), title="approved plan", title_align="left"))
            return kept(edited or plan)
        console.print("answer y, e or n")


def _choice(console: Console, payload: dict[str, Any]) -> str:
    """The attempt id the next round builds on; "" keeps the current choice (the user's /pick,
    else the policy's)."""
    from prompt_toolkit import prompt

    rows = payload["candidates"]
    table = Table("id", "strategy", "status", "speedup", "ms", title=f"after round {payload['round']}")
    for row in rows[:SHOWN]:
        speed, ms = row["speedup_vs_eager"], row["candidate_ms"]
        table.add_row(
            Text(row["attempt_id"]), Text(row["strategy"]), Text(row["status"]),
            f"{speed:.2f}x" if speed is not None else "-", f"{ms:.4g}" if ms is not None else "-",
        )  # fmt: skip
    console.print(table)
    current = payload.get("picked") or "the policy's choice"
    question = f"build round {payload['round'] + 1} on which attempt? [Enter: {current}] / [n]o (stop here): "
    ids = [row["attempt_id"] for row in rows]
    while True:
        try:
            reply = prompt(question).strip()
        except EOFError:
            raise RunStopped("no attempt chosen") from None
        if not reply:
            return ""
        if reply.lower() in ("n", "no", "/stop"):
            raise RunStopped("no attempt chosen")
        if reply in ids:
            return reply
        console.print(Text(f"no attempt {reply!r} to build on: answer one of {', '.join(ids[:SHOWN])}"))
