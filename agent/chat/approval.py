"""Terminal answers to the graph's interrupts: the plan is shown and approved, edited or refused.

``kforge chat`` and ``kforge optimize --approve`` both hand :func:`plan_approver` to
``run.optimize``, which resumes the graph with the answer (``Command(resume=plan)``).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markdown import Markdown
from rich.panel import Panel

from ..run import InterruptHandler, RunStopped

QUESTION = "approve the plan? [Y]es / [e]dit / [n]o (stop here): "
EDIT_HINT = "edit the plan, then Esc Enter to accept"


def plan_approver(console: Console) -> InterruptHandler:
    from prompt_toolkit import prompt

    def answer(payload: dict[str, Any]) -> Any:
        if payload.get("kind") != "plan":
            raise RunStopped(f"no answer known for a {payload.get('kind')!r} interrupt")
        plan = str(payload["plan"])
        title = "plan" if not payload.get("round") else f"new plan after round {payload['round']}"
        console.print(Panel(Markdown(plan), title=title, title_align="left"))
        while True:
            try:
                reply = prompt(QUESTION).strip().lower()
            except EOFError:  # Ctrl-D: no answer, the run stays at the plan
                raise RunStopped("plan not approved") from None
            if reply in ("", "y", "yes"):
                return plan
            if reply in ("n", "no", "/stop"):
                raise RunStopped("plan not approved")
            if reply in ("e", "edit"):
                console.print(f"[dim]{EDIT_HINT}[/]")
                edited = prompt("plan> ", default=plan, multiline=True).strip()
                console.print(Panel(Markdown(edited), title="approved plan", title_align="left"))
                return edited or plan
            console.print("answer y, e or n")

    return answer
