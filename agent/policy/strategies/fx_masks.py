"""The masks of hand-written attention, read off the FX graph for :mod:`.fx_attention`: whether
a boolean or additive mask is the causal one (built in the forward, or a buffer whose value
the Model built once on the CPU gives), whether a mask is the same for every batch entry, and
whether a finite fill is low enough to stand for -inf under a causal mask."""

from __future__ import annotations

import math
import operator
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.fx

from ....tools.task import import_file
from . import fx_inplace

Node = torch.fx.Node
BUFFER_READ_MAX_BYTES = 256 * 2**20  # a Model built on the CPU to read its buffers: at most this much state
FINITE_FILL_MAX = -1e9  # a finite fill this low is -inf's equal under a causal mask (fx_attention's doc)
Buffers = Callable[[], dict[str, torch.Tensor]]  # read only when a pattern needs a buffer's value


def call(node: Any, functions: tuple[Any, ...], methods: tuple[str, ...] = ()) -> bool:
    if not isinstance(node, Node):
        return False
    return (node.op == "call_function" and node.target in functions) or (
        node.op == "call_method" and node.target in methods
    )


def shape(node: Any) -> tuple[int, ...] | None:
    meta = node.meta.get("tensor_meta") if isinstance(node, Node) else None
    return tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else None


def arg(node: Node, index: int, name: str, default: Any = None) -> Any:
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def _ones(node: Any, size: tuple[int, int]) -> bool:
    """``torch.ones(L, S, ...)`` (any dtype, any device) of exactly ``size``."""
    return call(node, (torch.ones,)) and shape(node) == size


def real_buffers(task_path: Path, meta_model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The task's buffers with their values (a causal mask registered in ``__init__``): the
    Model built once more on the CPU, when its parameters and buffers are small enough."""
    state = [*meta_model.parameters(), *meta_model.buffers()]
    if not any(True for _ in meta_model.buffers()):
        return {}
    if sum(t.numel() * t.element_size() for t in state) > BUFFER_READ_MAX_BYTES:
        return {}
    try:
        module = import_file(task_path, f"kforge_buffers_{uuid.uuid4().hex[:8]}")
        with torch.device("cpu"):
            torch.manual_seed(0)
            model = module.Model(*module.get_init_inputs())
        return dict(model.named_buffers())
    except Exception:  # the task's own code: no values, no is_causal from a buffer
        return {}


def sliced_buffer(node: Any, buffers: Buffers, size: tuple[int, int]) -> torch.Tensor | None:
    """The value of ``buffer[..., :L, :S]`` (a slice from the start on the last two dims,
    whole on the others), or of the buffer itself when it is that size, when ``node`` is one
    of these and the buffer's value is known."""
    if isinstance(node, Node) and node.op == "get_attr":
        value = buffers().get(str(node.target))
        return value if value is not None and tuple(value.shape[-2:]) == size else None
    if not call(node, (operator.getitem,)) or not isinstance(node.args[0], Node):
        return None
    attr, index = node.args
    if attr.op != "get_attr" or not isinstance(index, tuple):
        return None
    value = buffers().get(str(attr.target))
    if value is None:
        return None
    if len(index) != value.dim() or not all(
        isinstance(i, slice) and i.start is None and i.step is None for i in index
    ):
        return None
    dims = shape(node)
    if any(i.stop is not None for i in index[:-2]) or dims is None or dims[-2:] != size:
        return None
    return value[..., : size[0], : size[1]]  # the stops are the traced sizes: the node's shape says them


def causal(mask: Any, q: tuple[int, ...] | None, k: tuple[int, ...] | None, buffers: Buffers) -> bool:
    """Whether ``mask`` (True = masked) is the causal one, the size of the scores: built in the
    forward (``triu(ones(L, S), diagonal=1)``, ``tril(ones(L, S)) == 0``) or read from a buffer
    whose value is known (``tril_buffer[:, :, :L, :S] == 0``). SDPA's ``is_causal`` masks the
    same (top-left aligned) entries."""
    if q is None or k is None:
        return False
    size = (q[-2], k[-2])
    value = sliced_buffer(mask, buffers, size)  # a boolean buffer, True above the diagonal
    if value is not None and value.dtype == torch.bool:
        return bool(torch.equal(value, torch.ones(size, dtype=torch.bool).triu(1).expand_as(value)))
    if call(mask, (operator.eq, torch.eq), ("eq",)) and mask.args[1] == 0:
        value = sliced_buffer(mask.args[0], buffers, size)
        if value is not None:
            keep = torch.ones(size, dtype=torch.bool).tril()
            return bool(torch.equal(value != 0, keep.expand_as(value)))
    if call(mask, (torch.triu,), ("triu",)) and arg(mask, 1, "diagonal", 0) == 1:
        return _ones(mask.args[0], size)
    if call(mask, (operator.eq, torch.eq), ("eq",)) and mask.args[1] == 0:
        tril = mask.args[0]
        return (
            call(tril, (torch.tril,), ("tril",))
            and arg(tril, 1, "diagonal", 0) == 0
            and _ones(tril.args[0], size)
        )
    return False


def causal_bias(mask: Any, q: tuple[int, ...] | None, k: tuple[int, ...] | None, buffers: Buffers) -> bool:
    """Whether the additive ``mask`` is the causal one: a buffer's value, sliced to the scores'
    size, or a value built in the forward from no input's values, that is 0 on and below the
    diagonal and -inf above (``full(-inf).triu(1)``, as transformers' eager attention adds it),
    or a finite fill at most FINITE_FILL_MAX there (CLIP's ``full(finfo.min)`` with
    ``masked_fill_`` of the rest to 0): every row keeps its diagonal key, so exp gives 0 above
    the diagonal either way."""
    if q is None or k is None:
        return False
    size = (q[-2], k[-2])
    value = sliced_buffer(mask, buffers, size)
    if value is None:
        value = constant_value(mask, buffers)
    if value is None or not value.is_floating_point() or tuple(value.shape[-2:]) != size:
        return False
    above = torch.ones(size, dtype=torch.bool).triu(1)
    return bool(((value == 0) | above).all()) and bool(((value <= FINITE_FILL_MAX) | ~above).all())


def batch_free(mask: Any) -> bool:
    """Whether a mask is the same for every batch entry (all dims before the last two are 1),
    so that it means the same over any grouping of the batch dimensions."""
    dims = shape(mask)
    return dims is not None and all(d == 1 for d in dims[:-2])


def very_negative(value: Any) -> bool:
    """A fill at most FINITE_FILL_MAX: a number, or ``torch.finfo(dtype).min`` as traced."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value <= FINITE_FILL_MAX
    return (
        call(value, (getattr,))
        and len(value.args) == 2
        and value.args[1] == "min"
        and call(value.args[0], (torch.finfo,))
    )


FAR_FILL_MAX = -1e30  # a fill this low absorbs any score below 1e31 in fp32: fill + s == fill


def far_negative(value: Any) -> bool:
    """An fp32 fill that any score added to it leaves as it is: a number in [finfo(float32).min,
    FAR_FILL_MAX], or ``torch.finfo(x.dtype).min`` / ``torch.finfo(torch.float32).min`` of an
    fp32 x (DeBERTa's padding fill). ``masked_fill(mask, fill)`` is then ``+ where(mask, fill,
    0)``, the same values on every row, one with every key filled too (equal weights)."""
    low = float(torch.finfo(torch.float32).min)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return low <= value <= FAR_FILL_MAX
    if not (very_negative(value) and value.args[0].args):
        return False
    dtype = value.args[0].args[0]
    if call(dtype, (getattr,)) and len(dtype.args) == 2 and dtype.args[1] == "dtype":
        meta = dtype.args[0].meta.get("tensor_meta") if isinstance(dtype.args[0], Node) else None
        dtype = getattr(meta, "dtype", None)
    return dtype == torch.float32


CONSTANT_MAX_NODES = 64  # a mask built from aranges and comparisons: a few nodes
CONSTANT_MAX_ELEMENTS = 2**26


def constant_value(node: Any, buffers: Buffers) -> torch.Tensor | None:
    """The value of ``node`` when it depends on no input's values (aranges, ones, comparisons,
    buffers whose values are known; an input's shape, dtype or device), computed on the CPU; None when it depends on one, or is not small.
    Gemma's sliding-window mask, built in the forward from aranges, is such a value."""
    if not isinstance(node, Node):
        return None
    order: list[Node] = []
    seen: set[Node] = set()

    def visit(n: Node) -> bool:
        if n in seen:
            return True
        seen.add(n)
        if n.op in ("placeholder", "call_module", "output") or len(seen) > CONSTANT_MAX_NODES:
            return False
        if not _reads_metadata(n):
            for a in n.all_input_nodes:
                if not visit(a):
                    return False
        order.append(n)
        return True

    if not visit(node):
        return None
    # in-place writes to what it reads (CLIP's mask: torch.full, then masked_fill_), in program
    # order; a write after it may land before its reader: not known here
    index = {n: i for i, n in enumerate(node.graph.nodes)}
    pending = fx_inplace.writes_to(order)
    while pending:
        write = pending.pop()
        if index[write] > index[node] or not visit(write):
            return None
        pending += [w for w in fx_inplace.writes_to(order) if w not in seen]
    order.sort(key=index.__getitem__)
    values: dict[Node, Any] = {}
    try:
        for n in order:
            values[n] = _evaluate(n, values, buffers)
    except Exception:  # an op that needs what the trace does not have: not a constant
        return None
    value = values[node]
    return value if isinstance(value, torch.Tensor) and value.numel() <= CONSTANT_MAX_ELEMENTS else None


def _reads_metadata(n: Node) -> bool:
    """``x.device``, ``x.dtype``, ``x.shape``, ``x.size(...)``, ``x.dim()``: what shape
    propagation recorded for x, not x's values."""
    if call(n, (getattr,)) and len(n.args) == 2 and n.args[1] in ("device", "dtype", "shape", "ndim"):
        return True
    return call(n, (), ("size", "dim"))


def _evaluate(n: Node, values: dict[Node, Any], buffers: Buffers) -> Any:
    if _reads_metadata(n):
        meta = n.args[0].meta.get("tensor_meta")  # type: ignore[union-attr]
        if not isinstance(meta, torch.Tensor):
            raise LookupError(n.args[0])
        if n.op == "call_method":
            return getattr(meta, str(n.target))(*n.args[1:], **n.kwargs)
        return torch.device("cpu") if n.args[1] == "device" else getattr(meta, str(n.args[1]))
    if n.op == "get_attr":
        value = buffers().get(str(n.target))
        if value is None:
            raise LookupError(n.target)
        return value.clone()  # an in-place write here must not reach the model's own buffer
    args = torch.fx.node.map_arg(n.args, lambda a: values[a])
    kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: values[a])
    kwargs = {k: (torch.device("cpu") if k == "device" else v) for k, v in kwargs.items()}
    if n.op == "call_method":
        return getattr(args[0], str(n.target))(*args[1:], **kwargs)
    return n.target(*args, **kwargs)  # type: ignore[operator]


def causal_window(keep: torch.Tensor) -> int | None:
    """0 when ``keep`` (L, S; True = attended) is the causal mask, w when it is the causal mask
    within the last w keys (a sliding window), else None. Top-left aligned, as SDPA's."""
    if keep.dim() != 2:
        return None
    length, size = keep.shape
    i, j = torch.arange(length)[:, None], torch.arange(size)[None, :]
    causal = j <= i
    if torch.equal(keep, causal):
        return 0
    window = int(keep.sum(1).max())
    return window if window > 0 and torch.equal(keep, causal & (i - j < window)) else None


def kept(value: torch.Tensor, fill: bool) -> torch.Tensor | None:
    """(L, S) True where a mask's value attends: a boolean fill mask's False entries, an
    additive mask's zeros (its others all at most FINITE_FILL_MAX); None when it differs
    between batch entries or is neither."""
    if value.dim() < 2 or any(d != 1 for d in value.shape[:-2]):
        return None
    value = value.reshape(value.shape[-2:])
    if fill:
        return ~value if value.dtype == torch.bool else None
    if not value.is_floating_point() or not bool(((value == 0) | (value <= FINITE_FILL_MAX)).all()):
        return None
    return value == 0


def window(mask: Any, how: str, q: Any, k: Any, buffers: Buffers) -> int | None:
    """0 when a mask built from no input is the causal one, w when it is the causal one within
    the last w keys (Gemma's and Mistral's sliding window, built from aranges), else None."""
    value = constant_value(mask, buffers) if q is not None and k is not None else None
    keep = kept(value, how == "fill") if value is not None else None
    return causal_window(keep) if keep is not None and tuple(keep.shape) == (q[-2], k[-2]) else None


def in_q_dims(graph: torch.fx.Graph, mask: Node, q: tuple[int, ...]) -> Node:
    """``mask`` with the dims it has beyond q's dropped, when they are 1 (a mask found over the
    viewed batch dimensions, which the attention pass accepts only batch-free)."""
    dims = shape(mask)
    if dims is None or len(dims) <= len(q):
        return mask
    return graph.call_method("reshape", (mask, *dims[-2:]))


# An additive mask's fill below this (transformers' finfo.min) overflows to -inf in a kernel that
# computes in log2 units, and a row of it then gives 0 or NaN where the softmax gives equal
# weights (ModernBERT's padded queries past its window, 2026-11-27: every SDPA rewrite was
# incorrect on an H100, max abs err 0.16). The mask passed to SDPA is kept at it; -inf stays.
MASK_FLOOR = -2.3e38
FLOORED = "kforge_floored"  # node meta: the additive mask a floored attn_mask was made from


def floored(graph: torch.fx.Graph, mask: Any) -> Any:
    """``mask`` with its fills below MASK_FLOOR (but -inf) at MASK_FLOOR: the same softmax. Made
    once a mask (the layers of a model share theirs)."""
    if not isinstance(mask, Node):
        return mask
    made = next((n for n in mask.users if n.meta.get(FLOORED) is mask), None)
    if made is not None:
        return made
    raised = graph.call_method("clamp", (mask,), {"min": MASK_FLOOR})
    finite = graph.call_function(operator.gt, (mask, -math.inf))
    out = graph.call_function(torch.where, (finite, raised, mask))
    out.meta[FLOORED] = mask
    return out
