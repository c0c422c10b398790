"""What follows a 3xTF32 convolution, moved into it (family ``tf32x3-conv``): a BatchNorm in
eval mode folded into the convolution's weight and bias, and a residual add and a ReLU into the
kernel's epilogue (kforge's NHWC kernel, :mod:`kforge.tools.gemm.conv`).

Conv2d + BatchNorm (running statistics) + ReLU is the block of a ResNet in inference. Eager
runs it as three passes over the activation (the convolution, the norm, the ReLU); folded,
the norm is a per-channel scale of the weight and a bias, computed once, and the ReLU is
applied to the accumulator before the kernel's one store: one pass, on tensor cores at fp32
accuracy. The fold is computed in float64 and rounded once to fp32, from the tensors the
module holds when it runs (so the weights the verifier loads are the ones folded), and again
whenever one of them is changed or replaced.

A ResNet bottleneck ends in ``relu(bn3(conv3(h)) + identity)``: the identity (or the
downsampling branch's output) is added to the accumulator before the ReLU, so the block's last
convolution writes its output once instead of three times.

A BatchNorm in training mode (batch statistics: KernelBench's default) is left alone, as is
one whose output something else reads too.

Which convolutions move (:func:`replace_convs`): every one the kernel computes, once one of
them is worth it, and none otherwise; the graph's inputs go channels-last once.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from . import fx_rewrite
from .fx_rewrite import meta as _meta

CONV_HELPERS = '''
from kforge.tools.gemm.conv import conv2d as conv2d_tf32x3, conv1d as conv1d_tf32x3


def _kforge_conv3(x, weight, bias, stride, padding, dilation, act=None, residual=None):
    """act(conv(x) + bias + residual) on the 3xTF32 kernel, 1-D or 2-D (the output in x's layout)."""
    conv = conv1d_tf32x3 if x.dim() == 3 else conv2d_tf32x3
    return conv(x, weight, bias, stride, padding, dilation, act, residual)


def _kforge_conv3_bn(x, weight, bias, bn_weight, bn_bias, mean, var, eps, stride, padding, dilation, act=None,
                     residual=None):
    """An eval-mode BatchNorm after the convolution, folded into its weight and bias."""
    weight, bias = _kforge_folded(weight, bias, bn_weight, bn_bias, mean, var, eps)
    conv = conv1d_tf32x3 if x.dim() == 3 else conv2d_tf32x3
    return conv(x, weight, bias, stride, padding, dilation, act, residual)


@torch.compiler.disable
def _kforge_folded(weight, bias, bn_weight, bn_bias, mean, var, eps):
    """weight * s and (bias - mean) * s + bn_bias with s = bn_weight / sqrt(var + eps), in
    float64 rounded once to fp32; kept on the weight until one of the tensors changes."""
    parts = (weight, bias, bn_weight, bn_bias, mean, var)
    key = tuple(None if t is None else (t.data_ptr(), t._version) for t in parts) + (eps,)
    kept = getattr(weight, "_kforge_fold", None)
    if kept is not None and kept[0] == key:
        return kept[1], kept[2]
    with torch.no_grad():
        scale = torch.rsqrt(var.double() + eps)
        if bn_weight is not None:
            scale = scale * bn_weight.double()
        shift = -mean.double() * scale
        if bias is not None:
            shift = shift + bias.double() * scale
        if bn_bias is not None:
            shift = shift + bn_bias.double()
        per_channel = scale.view(-1, *[1] * (weight.dim() - 1))
        folded = (weight.double() * per_channel).float().contiguous(), shift.float()
    weight._kforge_fold = (key, *folded)
    return folded
'''


def _kforge_conv3(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Any,
    padding: Any,
    dilation: Any,
    act: str | None = None,
    residual: torch.Tensor | None = None,
) -> torch.Tensor:
    """What the emitted convolution call computes (shape propagation runs it on meta tensors)."""
    conv = torch.nn.functional.conv1d if x.dim() == 3 else torch.nn.functional.conv2d
    out = conv(x, weight, bias, stride, padding, dilation)
    return fx_rewrite.activate(out if residual is None else out + residual, act)


def _kforge_conv3_bn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    bn_weight: torch.Tensor | None,
    bn_bias: torch.Tensor | None,
    mean: torch.Tensor,
    var: torch.Tensor,
    eps: float,
    stride: Any,
    padding: Any,
    dilation: Any,
    act: str | None = None,
    residual: torch.Tensor | None = None,
) -> torch.Tensor:
    out = _kforge_conv3(x, weight, bias, stride, padding, dilation)
    out = torch.nn.functional.batch_norm(out, mean, var, bn_weight, bn_bias, False, 0.0, eps)
    return fx_rewrite.activate(out if residual is None else out + residual, act)


HELPERS: dict[str, Callable[..., Any]] = {
    "_kforge_conv3": _kforge_conv3,
    "_kforge_conv3_bn": _kforge_conv3_bn,
}


def _foldable(
    gm: torch.fx.GraphModule, node: torch.fx.Node
) -> torch.nn.BatchNorm2d | torch.nn.BatchNorm1d | None:
    """The BatchNorm1d or 2d module ``node`` calls, when it normalizes with its running statistics."""
    if node.op != "call_module" or len(node.args) != 1 or node.kwargs:
        return None
    bn = gm.get_submodule(str(node.target))
    if (
        not isinstance(bn, torch.nn.BatchNorm2d | torch.nn.BatchNorm1d)
        or type(bn) not in (torch.nn.BatchNorm2d, torch.nn.BatchNorm1d)
        or bn.training
        or bn.running_mean is None
        or bn.running_var is None
    ):
        return None
    return bn


def _fold_norm(gm: torch.fx.GraphModule, conv: torch.fx.Node) -> torch.fx.Node:
    """``conv`` (a ``_kforge_conv3`` call) and its BatchNorm as one ``_kforge_conv3_bn`` call."""
    norm = fx_rewrite.sole_user(conv)
    bn = _foldable(gm, norm) if norm is not None else None
    if norm is None or bn is None:
        return conv
    graph, target = gm.graph, str(norm.target)
    x, weight, bias, stride, padding, dilation, act = conv.args
    with graph.inserting_before(norm):
        names = ("weight", "bias", "running_mean", "running_var")
        attrs = [graph.get_attr(f"{target}.{n}") if getattr(bn, n) is not None else None for n in names]
        args = (x, weight, bias, *attrs, float(bn.eps), stride, padding, dilation, act)
        fused = graph.create_node("call_function", _kforge_conv3_bn, args, name="conv3_bn")
    fused.meta.update(norm.meta)
    norm.replace_all_uses_with(fused)
    graph.erase_node(norm)
    graph.erase_node(conv)
    return fused


ADDS = (operator.add, operator.iadd, torch.add, torch.ops.aten.add.Tensor)


def _fuse_residual(gm: torch.fx.GraphModule, conv: torch.fx.Node) -> torch.fx.Node:
    """``conv`` + another fp32 tensor of its shape (the add its only user, in either order)
    as one call with that tensor as its ``residual``; the call moves to where the add was,
    after the tensor is computed (a ResNet's downsampling branch comes after conv3)."""
    users = list(conv.users)
    add = users[0] if len(users) == 1 else None
    if add is None or not fx_rewrite._is_call(add, ADDS, ("add", "add_")) or len(add.args) != 2 or add.kwargs:
        return conv
    if add.target in ("add", "add_") and add.args[0] is not conv:
        return conv  # other.add_(conv) writes into other: left as it is
    a, b = add.args
    other = b if a is conv else a
    mine, theirs = _meta(conv), _meta(other)
    if (
        other is conv
        or mine is None
        or theirs is None
        or theirs.shape != mine.shape
        or theirs.dtype != mine.dtype
    ):
        return conv
    add.prepend(conv)
    conv.kwargs = {**conv.kwargs, "residual": other}
    conv.meta.update(add.meta)
    add.replace_all_uses_with(conv)
    gm.graph.erase_node(add)
    return conv


def fuse_epilogue(gm: torch.fx.GraphModule, conv: torch.fx.Node) -> None:
    """Fold the BatchNorm that is ``conv``'s only user, add the tensor that is then added to
    the result, and move the ReLU, GELU or SiLU that is the result's only user into the kernel (the
    call's last positional argument)."""
    node = _fuse_residual(gm, _fold_norm(gm, conv))
    act = fx_rewrite.sole_user(node)
    name = None if act is None else fx_rewrite.activation(gm, act)
    if act is None or name is None:
        return
    node.args = (*node.args[:-1], name)
    node.meta.update(act.meta)
    act.replace_all_uses_with(node)
    gm.graph.erase_node(act)


VIEWS = ("view", "view_as")  # a channels-last tensor is not viewable as its NCHW shape


def channels_last_inputs(gm: torch.fx.GraphModule) -> int:
    """The graph's 4-D (3-D) fp32 inputs that a kernel convolution reads, converted to
    channels-last (channels innermost) once at the start: every kernel convolution then reads NHWC and writes NHWC (its output
    follows its input's memory format), with no conversion between layers. Left alone when the
    graph views a tensor (``.view`` of a channels-last tensor fails where the NCHW one works)."""
    graph = gm.graph
    convs = {_kforge_conv3, _kforge_conv3_bn}
    if any(n.op == "call_method" and n.target in VIEWS for n in graph.nodes):
        return 0
    converted = 0
    for node in list(graph.nodes):
        meta = _meta(node)
        if (
            node.op != "placeholder"
            or meta is None
            or meta.dim() not in (3, 4)
            or meta.dtype != torch.float32
        ):
            continue
        if not any(u.op == "call_function" and u.target in convs and u.args[0] is node for u in node.users):
            continue
        steps: list[tuple[str, tuple[Any, ...], dict[str, Any]]]
        if meta.dim() == 4:
            steps = [("contiguous", (), {"memory_format": torch.channels_last})]
        else:  # (N, C, L) with its channels innermost: (N, L, C) contiguous, seen as (N, C, L)
            steps = [("transpose", (1, 2), {}), ("contiguous", (), {}), ("transpose", (1, 2), {})]
        nhwc, made = node, set()
        for method, args, kwargs in steps:
            with graph.inserting_after(nhwc):
                nhwc = graph.call_method(method, (nhwc, *args), kwargs)
            made.add(nhwc)
        nhwc.meta.update(node.meta)
        node.replace_all_uses_with(nhwc, delete_user_cb=lambda user, made=made: user not in made)
        converted += 1
    return converted


MIN_CONV_K = 256  # C_in * KH * KW: a shorter reduction leaves the tensor cores idle (L2 21: 72)
# A tap's channels fill less than a K block: ResNet-50's stem (3 channels, 7x7) took 2.2 ms on
# the kernel against cuDNN's 0.46 (H100, bench_tf32x3.py --resnet, 2026-11-26).
MIN_CONV_CIN = 16
CONV_TILE = 128
MIN_CONV_TILES = 132  # one wave of 128x128 output tiles on an H100: fewer leave SMs idle


CONVS = (torch.nn.Conv1d, torch.nn.Conv2d)


def _convertible(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """An nn.Conv2d (or nn.Conv1d) call the kernel computes: groups 1, zero padding given as
    numbers, fp32 4-D (3-D) input, a tap's channels at least MIN_CONV_CIN."""
    if node.op != "call_module" or not node.users:
        return False
    conv = gm.get_submodule(str(node.target))
    x, out = _meta(node.args[0]) if node.args else None, _meta(node)
    return (
        isinstance(conv, CONVS)
        and conv.groups == 1
        and conv.padding_mode == "zeros"
        and not isinstance(conv.padding, str)
        and x is not None
        and out is not None
        and x.dtype == torch.float32
        and x.dim() == conv.weight.dim()
        and conv.in_channels >= MIN_CONV_CIN
    )


def _worth_it(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Enough output tiles and a long enough reduction to beat cuDNN alone."""
    conv, out = gm.get_submodule(str(node.target)), _meta(node)
    assert isinstance(conv, CONVS) and out is not None  # _convertible
    c_out, c_in = conv.weight.shape[:2]
    taps = conv.weight[0, 0].numel()
    pixels = out.numel() // c_out
    return c_in * taps >= MIN_CONV_K and -(-pixels // CONV_TILE) * -(-c_out // CONV_TILE) >= MIN_CONV_TILES


def replace_convs(gm: torch.fx.GraphModule) -> int:
    """When one nn.Conv2d or nn.Conv1d of the graph is worth the kernel (``_worth_it``), every
    convertible one becomes a ``_kforge_conv3`` call, and the graph's inputs go channels-last. All or
    none: a convolution left on cuDNN would take channels-last input, slower there than NCHW,
    and hand on its layout. ResNet-50 whole, H100, strict fp32: every convolution but the stem
    on the kernel 8.14 ms, the faster of kernel and cuDNN chosen per layer 9.23, eager 11.79
    (bench/bench_resnet_convs.py, 2026-11-26)."""
    graph = gm.graph
    convs = [node for node in graph.nodes if _convertible(gm, node)]
    if not any(_worth_it(gm, node) for node in convs):
        return 0
    for node in convs:
        conv = gm.get_submodule(str(node.target))
        assert isinstance(conv, CONVS) and not isinstance(conv.padding, str)  # _convertible
        with graph.inserting_before(node):
            weight = graph.get_attr(f"{node.target}.weight")
            bias = graph.get_attr(f"{node.target}.bias") if conv.bias is not None else None
            args = (
                node.args[0],
                weight,
                bias,
                tuple(conv.stride),
                tuple(conv.padding),
                tuple(conv.dilation),
                None,
            )
            new = graph.create_node("call_function", _kforge_conv3, args, name="conv3")
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        fuse_epilogue(gm, new)  # an eval-mode BatchNorm folded in, a ReLU in the epilogue
    channels_last_inputs(gm)
    return len(convs)
