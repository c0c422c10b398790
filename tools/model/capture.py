"""A region's forward as an FX graph, for :mod:`.extract` to write as source.

First FX's symbolic tracing: ``torch`` calls and ``torch.nn`` layers, the most readable
source, and the form the policy's FX rewrites read. Where that fails (a forward taking
``**kwargs``, control flow on shapes, a library's dispatch on attributes: the attention
modules of transformers), ``torch.export`` in non-strict mode on the recorded call, which
runs the Python and records ATen calls at the recorded shapes; control flow on tensor
values makes it fail rather than bake a branch in. Either way the graph's parameters and
buffers keep the region's own names, and its placeholders are the tensor arguments only.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from ..fx_source import trace


class CaptureError(ValueError):
    """No graph: the message says why, in one line."""


def fx_graph(module: torch.nn.Module, names: list[str], fixed: dict[str, Any]) -> torch.fx.GraphModule:
    try:
        gm = trace(module, concrete_args=fixed or None)
    except Exception as err:  # FX raises many kinds: control flow on a tensor, unsupported calls
        raise CaptureError(f"FX cannot trace it: {type(err).__name__}: {first_line(err)}") from None
    _drop_fixed(gm, names)
    return gm


class _Bound(torch.nn.Module):
    """The region called with its tensors by position (a tuple argument's tensors gathered
    back into it) and everything else fixed."""

    def __init__(
        self, inner: torch.nn.Module, names: list[str], fixed: dict[str, Any], groups: dict[str, list[str]]
    ) -> None:
        super().__init__()
        self.inner, self.names, self.fixed, self.groups = inner, names, fixed, groups

    def forward(self, *tensors: torch.Tensor) -> Any:
        return self.inner(**gather(dict(zip(self.names, tensors, strict=True)), self.groups), **self.fixed)


def gather(named: dict[str, Any], groups: dict[str, list[str]]) -> dict[str, Any]:
    """Keyword arguments from tensors by name, each group's tensors as one tuple."""
    out = {k: v for k, v in named.items() if not any(k in parts for parts in groups.values())}
    return out | {key: tuple(named[p] for p in parts) for key, parts in groups.items()}


def export_graph(
    module: torch.nn.Module,
    names: list[str],
    tensors: dict[str, torch.Tensor],
    fixed: dict[str, Any],
    groups: dict[str, list[str]] | None = None,
) -> torch.fx.GraphModule:
    """The region captured by ``torch.export`` (non-strict) at the recorded call."""
    args = tuple(tensors[n] for n in names)
    bound = _Bound(module, names, fixed, groups or {})
    try:
        with torch.no_grad():
            output = bound(*args)
            gm = torch.export.export(bound, args, strict=False).module()
    except Exception as err:  # export's own errors, and the region's on fake tensors
        raise CaptureError(
            f"torch.export cannot capture it: {type(err).__name__}: {first_line(err)}"
        ) from None
    graph = gm.graph
    graph._codegen = torch.fx.graph.CodeGen()  # plain arguments and results, no pytree specs
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for node, name in zip(placeholders, names, strict=True):
        node.target = name
        node._rename(name)
    for node in list(graph.nodes):
        if node.op == "get_attr" and str(node.target).startswith("inner."):
            node.target = str(node.target).removeprefix("inner.")
        elif node.op == "call_module" and not node.users:  # export's guard function
            graph.erase_node(node)
        elif node.op == "output":
            node.args = (_shaped(node.args[0], output),)
    for name, value in list(gm.named_buffers()) + list(gm.named_parameters()):
        if name.startswith("inner."):
            continue
        _set_attr(gm, name, value)  # a constant export lifted out of the forward: kept on gm
    gm.recompile()
    return gm


def _shaped(flat: Any, output: Any) -> Any:
    """The graph's flat results in the structure the region returns (a tensor or a tuple)."""
    items = list(flat) if isinstance(flat, list | tuple) else [flat]
    if isinstance(output, torch.Tensor):
        return items[0]
    if isinstance(output, tuple) and len(output) == len(items):
        return tuple(items)
    raise CaptureError(f"it returns a {type(output).__name__}: a task returns a tensor or a tuple")


def _set_attr(gm: torch.nn.Module, name: str, value: Any) -> None:
    owner, _, leaf = name.rpartition(".")
    target = gm.get_submodule(owner) if owner else gm
    setattr(target, leaf, value)


def _drop_fixed(gm: torch.fx.GraphModule, names: list[str]) -> None:
    """Placeholders of fixed arguments (and FX's checks of them) leave the graph: the task's
    forward takes the tensors only."""
    for node in list(gm.graph.nodes):
        if node.op == "placeholder" and node.target not in names:
            for user in list(node.users):
                if not user.users:
                    gm.graph.erase_node(user)
            if node.users:
                raise CaptureError(f"the fixed argument {node.target!r} is still read by the traced graph")
            gm.graph.erase_node(node)
    gm.recompile()


def first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [""])[0][:200]
