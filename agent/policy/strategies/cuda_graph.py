"""CUDA-graph capture of the forward pass: one graph launch replaces every kernel launch of
the eager forward, which is what launch-bound tasks (many small ops) spend their time on.
Inputs are copied into the graph's static buffers on each call and outputs are cloned."""

from __future__ import annotations

from ..features import TaskFeatures
from .source import Spec

CUDA_GRAPH = Spec(
    family="cuda-graph",
    runner="cuda-graph",
    note="the eager forward captured once and replayed: launch overhead goes away",
)
COMPILE_GRAPH = Spec(
    family="compile-graph",
    runner="compile-graph",
    note="Inductor's fused kernels captured in one CUDA graph",
)


def specs(features: TaskFeatures, device: str) -> list[Spec]:
    if device != "cuda":  # (a forward that syncs cannot be captured: registry.runnable)
        return []
    return [CUDA_GRAPH, COMPILE_GRAPH]
