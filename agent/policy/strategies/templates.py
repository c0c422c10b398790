"""kforge's Triton templates for memory-bound work, family ``triton-template``: one FX pass
puts each pattern it finds on its kernel.

- LayerNorm and RMSNorm, with the residual add before them (:mod:`.norms`,
  :mod:`kforge.tools.norms`);
- cross-entropy over 2-D fp32 logits with class-index targets, label smoothing and an ignored
  index, no class weights (``F.cross_entropy``, ``nn.CrossEntropyLoss``, ATen's
  ``cross_entropy_loss``): one read of the logits (:mod:`kforge.tools.losses`);
- softmax and log-softmax over the last dimension of an fp32 tensor, as a function, a method,
  a module or ATen's op, with a division or multiplication by a constant just before it (a
  temperature, an attention scale) applied as the input is read (:mod:`kforge.tools.softmax`);
- depthwise convolutions (an ``nn.Conv2d`` with one filter per channel: ConvNeXt's 7 x 7,
  MobileNet's and EfficientNet's 3 x 3 and 5 x 5), memory-bound at KH * KW multiply-adds per
  output (:mod:`kforge.tools.depthwise`);
- rotary position embeddings in transformers' ``x * cos + rotate_half(x) * sin`` form or
  GPT-J's interleaved ``rotate_every_two``, and the partial ones of GPT-NeoX and GPT-J (the
  rotated first columns concatenated with the rest): one read of x and one write
  (:mod:`kforge.tools.rotary`).

Each kernel is exact in semantics (the float64 bound of the fp32 class judges it like any
candidate); what the template saves is memory traffic.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from . import fx_rewrite, norms, rotary
from .source import Body, Spec
from .tf32x3 import Buffers, _Family, _meta, _rewrite, _spec

Node = torch.fx.Node
F = torch.nn.functional
REDUCTION_CODES = {0: "none", 1: "mean", 2: "sum"}  # ATen's reduction enum
CE_ARGS = (
    "input",
    "target",
    "weight",
    "size_average",
    "ignore_index",
    "reduce",
    "reduction",
    "label_smoothing",
)
CE_DEFAULTS = (None, None, None, None, -100, None, "mean", 0.0)
ATEN_CE_ARGS = ("self", "target", "weight", "reduction", "ignore_index", "label_smoothing")
ATEN_CE_DEFAULTS = (None, None, None, 1, -100, 0.0)

HELPERS = (
    norms.HELPERS
    + "from kforge.tools.losses import cross_entropy as _kforge_cross_entropy\n"
    + "from kforge.tools.softmax import softmax as _kforge_softmax\n"
    + "from kforge.tools.depthwise import depthwise_conv2d as _kforge_depthwise\n"
    + "from kforge.tools.rotary import rotary as _kforge_rotary\n"
)
SOFTMAXES = {  # callable -> whether it is the log form
    torch.softmax: False,
    torch.log_softmax: True,
    F.softmax: False,
    F.log_softmax: True,
    torch.special.softmax: False,
    torch.special.log_softmax: True,
}
SOFTMAX_ARGS = ("input", "dim", "_stacklevel", "dtype")
SOFTMAX_DEFAULTS = (None, None, 3, None)
ATEN_SOFTMAXES = {  # op -> (log form, the third argument's name, its default)
    torch.ops.aten._softmax.default: (False, "half_to_float", False),
    torch.ops.aten._log_softmax.default: (True, "half_to_float", False),
    torch.ops.aten.softmax.int: (False, "dtype", None),
    torch.ops.aten.log_softmax.int: (True, "dtype", None),
}
DIVS = (operator.truediv, torch.div, torch.ops.aten.div.Tensor)


def _kforge_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, reduction: str, ignore_index: int, label_smoothing: float
) -> torch.Tensor:
    """What the emitted call computes (shape propagation runs it on meta tensors)."""
    return F.cross_entropy(
        logits, target, reduction=reduction, ignore_index=ignore_index, label_smoothing=label_smoothing
    )


def _kforge_softmax(x: torch.Tensor, scale: float, log: bool) -> torch.Tensor:
    return (torch.log_softmax if log else torch.softmax)(x * scale, -1)


def _kforge_depthwise(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Any, padding: Any, dilation: Any
) -> torch.Tensor:
    return F.conv2d(x, weight, bias, stride, padding, dilation, x.shape[1])


def _depthwise_call(gm: torch.fx.GraphModule, node: Node) -> tuple[Any, ...] | None:
    """(x, weight, bias, stride, padding, dilation) of an nn.Conv2d with one filter per channel
    (depth multiplier 1), zero padding given as numbers, on a 4-D fp32 input."""
    if node.op != "call_module" or len(node.args) != 1 or node.kwargs:
        return None
    conv = gm.get_submodule(str(node.target))
    x = _meta(node.args[0])
    if (
        type(conv) is not torch.nn.Conv2d
        or conv.groups != conv.in_channels
        or conv.out_channels != conv.in_channels
        or conv.padding_mode != "zeros"
        or isinstance(conv.padding, str)
        or x is None
        or x.dtype != torch.float32
        or x.dim() != 4
    ):
        return None
    with gm.graph.inserting_before(node):
        weight = gm.graph.get_attr(f"{node.target}.weight")
        bias = gm.graph.get_attr(f"{node.target}.bias") if conv.bias is not None else None
    return node.args[0], weight, bias, tuple(conv.stride), tuple(conv.padding), tuple(conv.dilation)


def _softmax_call(gm: torch.fx.GraphModule, node: Node) -> tuple[Any, bool] | None:
    """(input, log) of a softmax or log-softmax over the last dimension, in fp32 with no dtype
    argument, else None."""
    if node.op == "call_module":
        mod = gm.get_submodule(str(node.target))
        if type(mod) not in (torch.nn.Softmax, torch.nn.LogSoftmax) or len(node.args) != 1 or node.kwargs:
            return None
        x, dim, dtype, log = node.args[0], mod.dim, None, type(mod) is torch.nn.LogSoftmax
    elif node.op == "call_method" and node.target in ("softmax", "log_softmax"):
        values = fx_rewrite.call_args(node, ("self", "dim", "dtype"), (None, None, None))
        if values is None:
            return None
        x, dim, dtype = values
        log = node.target == "log_softmax"
    elif node.op == "call_function" and node.target in SOFTMAXES:
        values = fx_rewrite.call_args(node, SOFTMAX_ARGS, SOFTMAX_DEFAULTS)
        if values is None:
            return None
        x, dim, _, dtype = values
        log = SOFTMAXES[node.target]
    elif node.op == "call_function" and node.target in ATEN_SOFTMAXES:
        log, third, default = ATEN_SOFTMAXES[node.target]
        values = fx_rewrite.call_args(node, ("self", "dim", third), (None, None, default))
        if values is None or values[2] not in (None, False):
            return None
        x, dim, dtype = values[0], values[1], None
    else:
        return None
    xm = _meta(x)
    if dtype is not None or xm is None or xm.dtype != torch.float32 or xm.dim() == 0:
        return None
    if not isinstance(dim, int) or isinstance(dim, bool) or dim not in (-1, xm.dim() - 1):
        return None
    return x, log


def _number(value: Any) -> float | None:
    """A nonzero int or float constant, as a float; else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value != 0:
        return float(value)
    return None


def _scaled(x: Any) -> tuple[Any, float]:
    """(y, c) when ``x`` is y / c or y * c (c a nonzero number) read by nothing else, else (x, 1)."""
    if not isinstance(x, Node) or len(x.users) != 1 or len(x.args) != 2 or x.kwargs:
        return x, 1.0
    a, b = x.args
    if fx_rewrite._is_call(x, DIVS, ("div",)) and (c := _number(b)) is not None:
        return a, 1.0 / c
    if fx_rewrite._is_call(x, norms.MULS, ("mul",)):
        if (c := _number(b)) is not None:
            return a, c
        if (c := _number(a)) is not None and x.op == "call_function":
            return b, c
    return x, 1.0


def _softmax_args(gm: torch.fx.GraphModule, node: Node) -> tuple[Any, float, bool] | None:
    """(input, scale, log) of the template call for a softmax, the constant factor before it
    taken in when it has the input's shape and dtype."""
    call = _softmax_call(gm, node)
    if call is None:
        return None
    x, log = call
    source, scale = _scaled(x)
    sm, xm = _meta(source), _meta(x)
    if sm is None or xm is None or sm.dtype != torch.float32 or sm.shape != xm.shape:
        source, scale = x, 1.0  # a broadcasting or non-fp32 factor: the softmax alone
    return source, scale, log


def _replace_calls(gm: torch.fx.GraphModule, find: Any, helper: Any, name: str) -> int:
    """Each node ``find(gm, node)`` gives arguments for, replaced by a call of ``helper`` with
    them; what it read and nothing else reads goes at the rewrite's next dead-code pass."""
    fired = 0
    graph = gm.graph
    for node in list(graph.nodes):
        args = find(gm, node) if node.users else None
        if args is None:
            continue
        with graph.inserting_before(node):
            new = graph.create_node("call_function", helper, args, name=name)
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        fired += 1
    return fired


def _cross_entropy_call(gm: torch.fx.GraphModule, node: Node) -> tuple[Any, ...] | None:
    """(logits, target, reduction, ignore_index, label_smoothing) of a cross-entropy the kernel computes."""
    if node.op == "call_module":
        mod = gm.get_submodule(str(node.target))
        if type(mod) is not torch.nn.CrossEntropyLoss or mod.weight is not None or len(node.args) != 2:
            return None
        fields: tuple[Any, ...] = (*node.args, mod.reduction, mod.ignore_index, mod.label_smoothing)
    elif fx_rewrite._is_call(node, (F.cross_entropy,)):
        values = fx_rewrite.call_args(node, CE_ARGS, CE_DEFAULTS)
        if values is None or values[2] is not None or values[3] is not None or values[5] is not None:
            return None  # class weights, or the deprecated size_average / reduce
        fields = (values[0], values[1], values[6], values[4], values[7])
    elif fx_rewrite._is_call(node, (torch.ops.aten.cross_entropy_loss.default,)):
        values = fx_rewrite.call_args(node, ATEN_CE_ARGS, ATEN_CE_DEFAULTS)
        if values is None:
            return None
        if values[2] is not None or values[3] not in REDUCTION_CODES:
            return None
        fields = (values[0], values[1], REDUCTION_CODES[values[3]], values[4], values[5])
    else:
        return None
    logits, target, reduction, ignore_index, smoothing = fields
    lm, tm = _meta(logits), _meta(target)
    if lm is None or tm is None or lm.dtype != torch.float32 or lm.dim() != 2:
        return None
    if (
        tm.dtype != torch.int64
        or tuple(tm.shape) != tuple(lm.shape[:1])
        or reduction not in REDUCTION_CODES.values()
    ):
        return None
    if not isinstance(ignore_index, int) or not isinstance(smoothing, int | float):
        return None
    return logits, target, reduction, ignore_index, float(smoothing)


def replace_templates(gm: torch.fx.GraphModule) -> int:
    return (
        norms.replace_norms(gm)
        + _replace_calls(gm, _cross_entropy_call, _kforge_cross_entropy, "cross_entropy")
        + _replace_calls(gm, _softmax_args, _kforge_softmax, "softmax")
        + _replace_calls(gm, _depthwise_call, _kforge_depthwise, "depthwise")
        + _rotaries(gm)
    )


def _rotaries(gm: torch.fx.GraphModule) -> int:
    """The rotary sums on the template, then each partial rotary's concatenation with it."""
    found = _replace_calls(gm, rotary.rotary_call, rotary._kforge_rotary, "rotary")
    if found:  # a new call has the sum's meta (_replace_calls): the partial pass reads its shape
        _replace_calls(gm, rotary.partial_rotary_call, rotary._kforge_rotary, "rotary")
    return found


TEMPLATE = _Family(
    "triton-template", "triton-template", "templates", replace_templates, "", HELPERS,
    {"_kforge_norm": norms._kforge_norm, "_kforge_add_norm": norms._kforge_add_norm,
     "_kforge_cross_entropy": _kforge_cross_entropy, "_kforge_softmax": _kforge_softmax,
     "_kforge_depthwise": _kforge_depthwise, "_kforge_rotary": rotary._kforge_rotary},
    "memory-bound patterns on kforge's Triton templates, one read of each input: LayerNorm / RMSNorm"
    " with the residual add, cross-entropy with label smoothing, (log-)softmax with its scale,"
    " depthwise convolutions, rotary embeddings (partial and interleaved too)",
    flash=False,
)  # fmt: skip


def rewrite(
    model: torch.nn.Module, inputs: list[Any], buffers: Buffers = None
) -> tuple[Body, list[str]] | None:
    """The forward with its memory-bound patterns on the templates, or None when it has none."""
    return _rewrite(TEMPLATE, model, inputs, buffers)


def spec(fired: list[str]) -> Spec:
    return _spec(TEMPLATE, fired)
