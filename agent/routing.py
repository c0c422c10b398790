"""Routing after the critic. Raises on a state it does not expect instead of guessing."""

from __future__ import annotations

from typing import Literal

from .state import State

END_NODE = "__end__"


class RoutingError(RuntimeError):
    pass


def after_critic(state: State) -> Literal["choose", "planner", "__end__"]:
    """Continue: the next round, after the user's choice of what it builds on (when asked for)."""
    decision = state.get("decision")
    if decision == "continue":
        return "choose"
    if decision == "replan":
        return "planner"
    if decision == "stop":
        return "__end__"
    raise RoutingError(f"critic left no valid decision (got {decision!r})")
