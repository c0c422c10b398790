"""The optimization loop as a LangGraph StateGraph. This module only wires.

planner -> coder -> evaluate -> profiler -> critic -> choose -> coder (next round) | planner (replan) | END
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from .context import RunContext
from .nodes.choose import choose
from .nodes.coder import coder
from .nodes.critic import critic
from .nodes.evaluate import evaluate
from .nodes.planner import planner
from .nodes.profiler import profiler
from .routing import after_critic
from .state import RunInput, State


def build_graph() -> StateGraph[State, RunContext, RunInput, State]:
    graph = StateGraph(State, context_schema=RunContext, input_schema=RunInput)
    graph.add_node("planner", planner)
    graph.add_node("coder", coder)
    graph.add_node("evaluate", evaluate)
    graph.add_node("profiler", profiler)
    graph.add_node("critic", critic)
    graph.add_node("choose", choose)
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "coder")
    graph.add_edge("coder", "evaluate")
    graph.add_edge("evaluate", "profiler")
    graph.add_edge("profiler", "critic")
    graph.add_conditional_edges("critic", after_critic, {"choose": "choose", "planner": "planner", END: END})
    graph.add_edge("choose", "coder")
    return graph
