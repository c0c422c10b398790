"""In-place ops in a traced graph: which tensor each one writes, and whether a write is seen.

FX counts a method call as pure, so dead-code elimination drops ``mask.masked_fill_(cond, 0)``
when its result is unused: CLIP's causal mask (transformers' ``_make_causal_mask``) became a
mask of the dtype's minimum everywhere, and every rewrite of the block was wrong. A write is
kept when something reads what it wrote afterwards (through any view of it) or when it writes
an input, a parameter or a buffer; a mask computed on the CPU (``fx_masks.constant_value``)
applies the writes before it, in program order.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import torch
import torch.fx
from torch.fx import Node

# Ops whose result may share the first argument's memory (a write to one is seen in the other).
# `to`, `contiguous`, `float` and `type_as` return their input when nothing changes.
VIEW_METHODS = frozenset(
    "view view_as reshape reshape_as expand expand_as transpose permute unsqueeze squeeze t narrow select "
    "flatten unflatten as_strided detach contiguous to type_as float unfold diagonal movedim swapaxes "
    "split chunk unbind tensor_split real imag".split()
)
VIEW_FUNCTIONS = (
    operator.getitem, torch.reshape, torch.transpose, torch.permute, torch.unsqueeze, torch.squeeze,
    torch.flatten, torch.narrow, torch.select, torch.t, torch.detach, torch.split, torch.chunk, torch.unbind,
    torch.movedim, torch.diagonal, torch.as_strided, torch.swapaxes,
)  # fmt: skip
AUGMENTED = (
    operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
    operator.ipow, operator.iand, operator.ior, operator.ixor, operator.ilshift, operator.irshift,
    operator.imatmul,
)  # fmt: skip


def is_view(node: Any) -> bool:
    if not isinstance(node, Node) or not node.args or not isinstance(node.args[0], Node):
        return False
    if node.op == "call_method":
        return node.target in VIEW_METHODS
    return node.op == "call_function" and node.target in VIEW_FUNCTIONS


def written(node: Node) -> Any:
    """The tensor an in-place op writes (``x.masked_fill_(...)``, ``x[i] = v``, ``x += y``,
    ``torch.relu_(x)``, ``F.relu(x, inplace=True)``, an ``nn.ReLU(inplace=True)``), else None."""
    if not node.args:
        return None
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if node.op == "call_method" and name.endswith("_") and not name.startswith("_"):
        return node.args[0]
    if node.op == "call_function":
        if node.target is operator.setitem or node.target in AUGMENTED or node.kwargs.get("inplace") is True:
            return node.args[0]
        if name.endswith("_") and not name.startswith("_"):
            return node.args[0]
    if node.op == "call_module" and node.graph.owning_module is not None:
        module = node.graph.owning_module.get_submodule(str(node.target))
        if getattr(module, "inplace", False) is True:
            return node.args[0]
    return None


def root(node: Any) -> Any:
    """The node whose memory ``node`` is (a view of)."""
    while is_view(node):
        node = node.args[0]
    return node


def aliases(node: Node) -> set[Node]:
    """``node`` and every view of it, taken from it or from one another."""
    found, stack = {node}, [node]
    while stack:
        for user in stack.pop().users:
            if user not in found and is_view(user) and user.args[0] in found:
                found.add(user)
                stack.append(user)
    return found


def writes_to(nodes: Iterable[Node]) -> list[Node]:
    """The in-place ops that write the memory of any of ``nodes``."""
    out: list[Node] = []
    for memory in {m for m in map(root, nodes) if isinstance(m, Node)}:
        for alias in aliases(memory):
            out += [u for u in alias.users if u not in out and written(u) is alias]
    return out


def eliminate_dead_code(graph: torch.fx.Graph) -> None:
    """FX's dead-code elimination, keeping every in-place op whose write is seen."""
    index = {n: i for i, n in enumerate(graph.nodes)}

    def seen(node: Node) -> bool:
        if node.is_impure():
            return True
        target = written(node)
        if target is None:
            return False
        memory = root(target)
        if not isinstance(memory, Node) or memory.op in ("placeholder", "get_attr"):
            return True  # the task's own input, parameter or buffer
        same = aliases(memory)
        return any(index[u] > index[node] for a in same for u in a.users if u is not node and u not in same)

    graph.eliminate_dead_code(is_impure_node=seen)
