"""Work on a table before the gather that reads it: a gathered embedding table's contractions
(``gathered_tables``) and a Linear of gathered rows (``gathered_linears``, at the end).

TiSASRec's time-interval attention (unseen10, 1.047x over compile, the set's slowest) looks up
an embedding per query and key pair, ``R = E[t]`` of (B, L, S, D) from a table E of (V, D),
folds its heads into the batch (``cat(split(R, d, dim=-1), dim=0)``), and contracts it twice:

- with the queries, ``R.matmul(q.unsqueeze(-1))``: r[n, i, j] = q[n, i] . E_h[t[b, i, j]], which
  is ``(q E_h^T)[t]``: an (L, V) product per row, then a gather of numbers;
- with the attention weights, ``w.unsqueeze(2).matmul(R)``: o[n, i] = sum_j w[n, i, j]
  E_h[t[b, i, j]], which is the weights summed per table row (a scatter-add into V buckets),
  then times E_h.

R is 1.3 GB there (128 x 200 x 200 x 64 fp32) and compile gathers it, reads it twice per block
and reaches 3% of the roofline; the rewritten form never builds it. The sums run in another
order (fp32 rounding; the evaluator judges them against float64 like any candidate).

Taken where the table has at most ``MAX_ROWS_PER_KEY`` times as many rows as the gather has
keys (the product then costs at most that many times the original contraction's FLOPs, and
saves the gathered tensor's traffic).
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.fx

from .fx_masks import arg, call, shape
from .fx_operands import dtype_of

Node = torch.fx.Node
MATMULS = (torch.matmul, operator.matmul)
MAX_ROWS_PER_KEY = 4


def _lookup(gm: torch.fx.GraphModule, node: Node) -> tuple[Node, str | Node, int] | None:
    """(the indices, the table: a parameter's name or a graph value, its rows) of an embedding
    lookup ``node``: an ``nn.Embedding`` or ``F.embedding(idx, W)``, without max_norm."""
    if node.op == "call_module":
        module = gm.get_submodule(str(node.target))
        if type(module) is not torch.nn.Embedding or module.max_norm is not None or len(node.args) != 1:
            return None
        index = node.args[0]
        return (index, f"{node.target}.weight", module.num_embeddings) if isinstance(index, Node) else None
    if call(node, (torch.nn.functional.embedding,)) and arg(node, 3, "max_norm") is None:
        index, table = node.args[0], arg(node, 1, "weight")
        rows = shape(table)
        if isinstance(index, Node) and isinstance(table, Node) and rows is not None:
            return index, table, rows[0]
    return None


def _folded(split: Node, node: Node, width: int) -> tuple[Node, int] | None:
    """(the folded tensor, heads) where ``split`` is ``split(node, d, dim=-1)`` read only by
    ``cat(split, dim=0)``: the heads folded into the batch."""
    if not call(split, (torch.split, torch.functional.split), ("split",)) or split.args[0] is not node:
        return None
    size, dim = arg(split, 1, "split_size_or_sections"), arg(split, 2, "dim", 0)
    rank = len(shape(node) or ())
    if (
        type(size) is not int
        or size <= 0
        or width % size
        or dim not in (rank - 1, -1)
        or len(split.users) != 1
    ):
        return None
    cat = next(iter(split.users))
    if not call(cat, (torch.cat, torch.concat)) or cat.args[0] is not split or arg(cat, 1, "dim", 0) != 0:
        return None
    return cat, width // size


def _contractions(gm: torch.fx.GraphModule, node: Node) -> int:
    found = _lookup(gm, node)
    out = shape(node)
    if found is None or out is None or len(out) != 4:
        return 0
    index, table, vocab = found
    batch, rows, keys, width = out
    if shape(index) != (batch, rows, keys) or vocab > MAX_ROWS_PER_KEY * keys:
        return 0
    with gm.graph.inserting_before(node):
        weight = gm.graph.get_attr(table) if isinstance(table, str) else table
    fired = 0
    for user in list(node.users):  # each a contraction, or heads folded into the batch first
        gathered, heads = _folded(user, node, width) or (node, 1)
        sizes = (heads, batch, rows, keys, vocab, width // heads)
        readers = list(gathered.users) if gathered is not node else [user]
        fired += sum(_rewrite(gm, r, gathered, (weight, index), sizes) for r in readers)
    if not fired and not weight.users and weight is not table:
        gm.graph.erase_node(weight)
    return fired


def _rewrite(
    gm: torch.fx.GraphModule, user: Node, gathered: Node, found: tuple[Node, Node], sizes: tuple
) -> int:
    """One contraction of the gathered tensor (N, L, S, d), N = heads * B, rewritten on the table."""
    heads, batch, rows, keys, vocab, d = sizes
    n = heads * batch
    if not call(user, MATMULS, ("matmul",)) or len(user.args) != 2 or user.kwargs:
        return 0
    left, right = user.args
    side = "q" if left is gathered and shape(right) == (n, rows, d, 1) else ""
    side = side or ("w" if right is gathered and shape(left) == (n, rows, 1, keys) else "")
    if not side or left is right:
        return 0
    weight, index = found
    g = gm.graph
    with g.inserting_before(user):
        per_head = g.call_method("permute", (g.call_method("view", (weight, vocab, heads, d)), 1, 0, 2))
        where = g.call_method("expand", (g.call_method("unsqueeze", (index, 0)), heads, batch, rows, keys))
        if dtype_of(index) != torch.int64:
            where = g.call_method("long", (where,))
        if side == "q":  # (q E_h^T)[t]
            q = g.call_method("reshape", (right, heads, batch, rows, d))
            table_t = g.call_method("unsqueeze", (g.call_method("transpose", (per_head, 1, 2)), 1))
            scores = g.call_function(torch.matmul, (q, table_t))  # (H, B, L, V)
            out = g.call_method(
                "reshape", (g.call_function(torch.gather, (scores, -1, where)), n, rows, keys, 1)
            )
        else:  # the weights summed per table row, then times E_h
            w = g.call_method("reshape", (left, heads, batch, rows, keys))
            buckets = g.call_method("new_zeros", (w, (heads, batch, rows, vocab)))
            summed = g.call_method("scatter_add", (buckets, -1, where, w))
            out = g.call_method(
                "reshape",
                (
                    g.call_function(torch.matmul, (summed, g.call_method("unsqueeze", (per_head, 1)))),
                    n,
                    rows,
                    1,
                    d,
                ),
            )
    user.replace_all_uses_with(out)
    return 1


def gathered_tables(gm: torch.fx.GraphModule) -> int:
    """Every contraction of a gathered embedding table with queries or weights, done on the
    table (see the module's docstring); the number rewritten."""
    return sum(
        _contractions(gm, node)
        for node in list(gm.graph.nodes)
        if node.op in ("call_module", "call_function")
    )


# A Linear of gathered rows (message passing: EGNN's edge MLP reads cat([h[row], h[col],
# radial]), 257 features a pair over 96,572 pairs of 4,854 atoms, unseen10) is the Linear of the
# rows first, then the gather: linear(cat([a[i], b[j], c])) = (a W_a^T)[i] + (b W_b^T)[j] + c
# W_c^T + bias, with W split by the pieces' columns. A piece counts as gathered where its source
# has at most half as many rows as the gather reads; the rewrite is taken where that halves the
# Linear's work at least, over at most MAX_PIECES pieces (a CTR model's Linear over 26 fields'
# lookups would become 26 small products and 25 sums in place of one GEMM).
MAX_ROWS_PER_READ = 0.5
MAX_WORK_SHARE = 0.5
MAX_PIECES = 4


def _gather(gm: torch.fx.GraphModule, node: Any) -> tuple[Node | str, Node, int] | None:
    """(source, index, the source's rows) of rows read by an integer index: ``source[index]`` of
    a 2-D tensor, or an embedding lookup (``_lookup``), when the source has at most
    ``MAX_ROWS_PER_READ`` rows a read."""
    if not isinstance(node, Node):
        return None
    source: Node | str
    if call(node, (operator.getitem,)) and len(node.args) == 2 and isinstance(node.args[0], Node):
        source, index = node.args[0], node.args[1]
        rows = shape(source)
        count = rows[0] if rows is not None and len(rows) == 2 else None
    elif (found := _lookup(gm, node)) is not None:
        index, source, count = found
    else:
        return None
    reads = shape(index)
    if (
        count is None
        or not isinstance(index, Node)
        or not reads
        or dtype_of(index) not in (torch.int64, torch.int32)
    ):
        return None
    return (source, index, count) if count <= MAX_ROWS_PER_READ * math.prod(reads) else None


def _linear(gm: torch.fx.GraphModule, node: Node) -> tuple[Node, str, bool] | None:
    """(the input, the module's name, whether it has a bias) of an ``nn.Linear`` call."""
    if node.op != "call_module" or len(node.args) != 1 or node.kwargs:
        return None
    module = gm.get_submodule(str(node.target))
    if type(module) is not torch.nn.Linear or not isinstance(node.args[0], Node):
        return None
    return node.args[0], str(node.target), module.bias is not None


def _pieces(gm: torch.fx.GraphModule, node: Node) -> list[Node] | None:
    """The pieces of ``cat(pieces, dim=-1)`` (of one rank, 2 or more), or ``[node]`` itself where
    it is gathered rows; None for anything else."""
    if _gather(gm, node) is not None:
        return [node]
    if not call(node, (torch.cat, torch.concat)) or not isinstance(node.args[0], list | tuple):
        return None
    pieces, dim = list(node.args[0]), arg(node, 1, "dim", 0)
    ranks = {len(s) if s is not None else 0 for s in map(shape, pieces)}
    if len(ranks) != 1 or min(ranks) < 2 or dim not in (min(ranks) - 1, -1):
        return None
    return pieces if all(isinstance(p, Node) for p in pieces) else None


def _split_linear(gm: torch.fx.GraphModule, node: Node) -> int:
    found = _linear(gm, node)
    pieces = _pieces(gm, found[0]) if found is not None else None
    if found is None or pieces is None or not 0 < len(pieces) <= MAX_PIECES:
        return 0
    widths = [int(shape(p)[-1]) for p in pieces]  # type: ignore[index]
    reads = math.prod(shape(pieces[0])[:-1])  # type: ignore[index]
    gathers = [_gather(gm, p) for p in pieces]
    work = sum((g[2] if g is not None else reads) * w for g, w in zip(gathers, widths, strict=True))
    if all(g is None for g in gathers) or work > MAX_WORK_SHARE * reads * sum(widths):
        return 0
    _, name, has_bias = found
    g = gm.graph
    with g.inserting_before(node):
        weight, total, start = g.get_attr(f"{name}.weight"), None, 0
        for piece, gathered, width in zip(pieces, gathers, widths, strict=True):
            columns = g.call_function(operator.getitem, (weight, (slice(None), slice(start, start + width))))
            source = gathered[0] if gathered is not None else piece
            rows = g.get_attr(source) if isinstance(source, str) else source
            part = g.call_function(torch.nn.functional.linear, (rows, columns))
            if gathered is not None:
                part = g.call_function(operator.getitem, (part, gathered[1]))
            total = part if total is None else g.call_function(operator.add, (total, part))
            start += width
        if has_bias:
            total = g.call_function(operator.add, (total, g.get_attr(f"{name}.bias")))
    node.replace_all_uses_with(total)  # type: ignore[arg-type]
    return 1


def gathered_linears(gm: torch.fx.GraphModule) -> int:
    """Every Linear of concatenated pieces some of which are gathered rows, done on the rows
    before the gather (see ``MAX_ROWS_PER_READ``); the number rewritten."""
    return sum(_split_linear(gm, node) for node in list(gm.graph.nodes) if node.op == "call_module")
