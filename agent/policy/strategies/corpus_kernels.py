"""Fused Triton kernels from the shipped prior kernels (``examples/candidates/*_triton.py``)
for the task patterns they implement, with tile-size variants.

A task matches when its traced forward is the single op a kernel computes (softmax over
the last dimension, LayerNorm, a keepdim sum, cross-entropy). The kernel file, minus its
own ModelNew, becomes the candidate's prelude; the body calls its wrapper function.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Callable
from importlib import resources
from typing import Any

import torch
import torch.fx

from ....tools import fx_source
from .source import Body, Spec


@dataclasses.dataclass(frozen=True)
class Kernel:
    file: str  # under examples/candidates
    call: str  # the body's return expression, formatted with the match's fields
    variants: tuple[tuple[str, str, str], ...]  # (variant name, regex, replacement) on the kernel file


CAP = r"(BLOCK_SIZE = min\(triton\.next_power_of_2\(n_\w+\), )2048\)"
ROW_VARIANTS = (
    ("bs2048", CAP, r"\g<1>2048)"),
    ("bs1024", CAP, r"\g<1>1024)"),
    ("bs4096", CAP, r"\g<1>4096)"),
)
KERNELS = {
    "softmax": Kernel("softmax_triton.py", "softmax({x})", ROW_VARIANTS),
    "layernorm": Kernel(
        "layernorm_triton.py",
        "layernorm({x}.reshape(-1, {cols}), self.{mod}.weight.reshape(-1), self.{mod}.bias.reshape(-1),"
        " self.{mod}.eps).reshape({x}.shape)",
        ROW_VARIANTS,
    ),
    "row_sum": Kernel(
        "row_sum_triton.py",
        "sum_keepdim({x}, {dim})",
        (
            ("r32", r"BLOCK_R = 32", "BLOCK_R = 32"),
            ("r16", r"BLOCK_R = 32", "BLOCK_R = 16"),
            ("r64", r"BLOCK_R = 32", "BLOCK_R = 64"),
        ),
    ),
    "cross_entropy": Kernel("cross_entropy_triton.py", "cross_entropy({x}, {y})", ROW_VARIANTS),
}


def _compute_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]


def match(model: torch.nn.Module, inputs: list[Any]) -> tuple[str, dict[str, Any]] | None:
    """(kernel name, fields for its call) when the forward is one op a kernel implements."""
    gm = fx_source.trace(model, meta_inputs=inputs)
    nodes = _compute_nodes(gm)
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    if len(nodes) != 1 or not placeholders:
        return None
    node = nodes[0]
    x = inputs[0]
    if (
        not isinstance(x, torch.Tensor)
        or x.dtype != torch.float32
        or node.args[:1] != (gm.graph.find_nodes(op="placeholder")[0],)
    ):
        return None
    dim = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else None)
    if node.target in (torch.softmax, torch.nn.functional.softmax, "softmax") and dim in (-1, x.dim() - 1):
        return "softmax", {"x": placeholders[0]}
    if node.target in (torch.sum, "sum") and isinstance(dim, int) and node.kwargs.get("keepdim") is True:
        return "row_sum", {"x": placeholders[0], "dim": dim}
    if (
        node.target is torch.nn.functional.cross_entropy
        and len(placeholders) == 2
        and len(node.args) == 2
        and not node.kwargs
    ):
        return "cross_entropy", {"x": placeholders[0], "y": placeholders[1]}
    if node.op == "call_module":
        mod = gm.get_submodule(str(node.target))
        if isinstance(mod, torch.nn.LayerNorm) and mod.weight is not None and mod.bias is not None:
            cols = 1
            for size in mod.normalized_shape:
                cols *= size
            return "layernorm", {"x": placeholders[0], "mod": node.target, "cols": cols}
    return None


def _kernel_source(kernel: Kernel, variant: int) -> str:
    _, pattern, repl = kernel.variants[variant]
    return prior_kernel(kernel.file, lambda text: re.sub(pattern, repl, text))


def prior_kernel(file: str, edit: Callable[[str], str] = lambda text: text) -> str:
    """A shipped kernel file (examples/candidates), edited, without its docstring and ModelNew:
    the module-level code a candidate's prelude takes from it."""
    text = edit(resources.files("kforge.examples").joinpath(f"candidates/{file}").read_text())
    tree = ast.parse(text)
    tree.body = [n for n in tree.body if not (isinstance(n, ast.ClassDef) and n.name == "ModelNew")]
    if tree.body and isinstance(tree.body[0], ast.Expr):
        tree.body = tree.body[1:]  # the file's docstring
    return ast.unparse(tree)


def body(name: str, fields: dict[str, Any], variant: int, params: list[str]) -> Body:
    kernel = KERNELS[name]
    call = kernel.call.format(**fields)
    method = f"def _kforge_body(self, {', '.join(params)}):\n    return {call}\n"
    return Body(method=method, prelude=_kernel_source(kernel, variant))


def spec(name: str, variant: int) -> Spec:
    tag = KERNELS[name].variants[variant][0]
    return Spec(
        family="corpus-triton",
        body=f"corpus:{name}:{variant}",
        tag=f"corpus:{name}_triton:{tag}",
        note=f"the prior fused Triton {name} kernel ({tag}): one pass over memory",
    )


def n_variants(name: str) -> int:
    return len(KERNELS[name].variants)
