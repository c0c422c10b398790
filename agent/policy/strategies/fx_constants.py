"""Tensors the tracer made from Python numbers in the forward (``torch.tensor(d)``, a
``torch.arange`` of sizes): ModelNew has no attribute for them, so a rewrite that named them
could not run. ``inline`` writes them into the code: a small one as ``torch.tensor(values)``,
an integer index table (SAM's relative positions, 64 x 64) or a float table (DiT's timestep
frequencies, ``torch.exp(-log(p) * torch.arange(128) / 128)``) as a literal the candidate's own
helper builds once. Anything else stays, and the rewrite is not offered."""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

CONSTANT_MAX_NUMEL = 64
TABLE_MAX_NUMEL = 1 << 16  # an integer or boolean table the tracer made, as a literal (TABLE_HELPER)
# A float table, likewise: each value written as Python's repr of it, which reads back to the
# same float64, so the same float32 (or half) bits; about 20 characters an element.
FLOAT_TABLE_MAX_NUMEL = 1 << 14
# The candidate's own helper (kforge's modules outside its kernel libraries are the evaluator,
# which a candidate may not import): the table is built on the first call and kept by the
# literal's identity (one object, the code's constant) and the device the forward's factories
# make tensors on (the CPU, as the forward made it; the inputs' device under device-factories,
# where a CUDA graph captures no copy from the host), so a call costs a dictionary lookup, not
# a 4,096-element torch.tensor. Under torch.compile it is a constant of the graph.
TABLE_HELPER = '''
_kforge_tables = {}


def _kforge_table(values, dtype, shape):
    """A table the tracer made from Python numbers, built once where the forward's factories
    make tensors (the forward only reads it)."""
    if torch.compiler.is_compiling():
        return torch.tensor(values, dtype=dtype).reshape(shape)
    key = (id(values), torch.empty(0).device)
    kept = _kforge_tables.get(key)
    if kept is None or kept[0] is not values:
        kept = (values, torch.tensor(values, dtype=dtype).reshape(shape))
        _kforge_tables[key] = kept
    return kept[1]
'''
_helper_namespace: dict[str, Any] = {"torch": torch}
exec(TABLE_HELPER, _helper_namespace)  # the same function, for the graph's nodes to name
table = _helper_namespace["_kforge_table"]
table.__module__ = __name__  # fx names a call's target by its module (emit then renames it)
TABLE_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
FLOAT_TABLE_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def _table(value: torch.Tensor) -> bool:
    """Whether ``value`` can be a literal: an integer or boolean table up to TABLE_MAX_NUMEL, a
    finite float table up to FLOAT_TABLE_MAX_NUMEL (an infinity or NaN has no literal)."""
    if value.dtype in TABLE_DTYPES:
        return value.numel() <= TABLE_MAX_NUMEL
    return (
        value.dtype in FLOAT_TABLE_DTYPES
        and value.numel() <= FLOAT_TABLE_MAX_NUMEL
        and bool(torch.isfinite(value).all())
    )


def inline(gm: torch.fx.GraphModule, model: torch.nn.Module) -> None:
    """A table that the forward only reads (``_table``: SAM's relative position indices, 64 x
    64 from ``torch.arange``; DiT's 128 timestep frequencies in float32; RAFT's 9 x 9 grid of
    offsets) becomes a literal built once (``TABLE_HELPER``), bit for bit the tensor the tracer
    made. Another small tensor (``torch.tensor(x)`` of a number in the forward: DeBERTa's
    ``torch.log(torch.tensor(...))``, ``torch.sqrt(torch.tensor(d))``) becomes the same
    ``torch.tensor(values, dtype=...)`` in the code (a CPU tensor, as the forward made it).
    Anything larger stays an attribute ModelNew lacks, so the rewrite is not offered."""
    for node in list(gm.graph.nodes):
        if node.op != "get_attr" or has_attr(model, str(node.target)):
            continue
        value = getattr(gm, str(node.target), None)
        if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
            continue
        with gm.graph.inserting_before(node):
            if value.dim() > 0 and _table(value) and only_read(gm, str(node.target)):
                values = tuple(value.reshape(-1).tolist())
                made = gm.graph.call_function(table, (values, value.dtype, tuple(value.shape)), name="table")
            elif value.numel() <= CONSTANT_MAX_NUMEL:
                made = gm.graph.call_function(torch.tensor, (value.tolist(),), {"dtype": value.dtype})
            else:
                continue
        made.meta.update(node.meta)
        node.replace_all_uses_with(made)
        gm.graph.erase_node(node)


WRITES = {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
          "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__"}  # fmt: skip


def only_read(gm: torch.fx.GraphModule, target: str) -> bool:
    """Whether no user of any of the graph's reads of attribute ``target`` writes it in place
    (``x.add_()``, ``x[i] = v``, ``x += v``, ``out=``). What the forward did to it from numbers
    alone, the tracer did already; a write from a traced value is a node here."""
    for node in gm.graph.nodes:
        if node.op != "get_attr" or str(node.target) != target:
            continue
        for user in node.users:
            name = str(getattr(user.target, "__name__", user.target))
            in_place = name.endswith("_") and not name.endswith("__")
            if in_place or name in WRITES or user.target is operator.setitem or "out" in user.kwargs:
                return False
    return True


def has_attr(model: torch.nn.Module, path: str) -> bool:
    obj: Any = model
    for part in path.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True
