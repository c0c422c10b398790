"""fp32 GEMMs and convolutions on tensor cores at fp32 accuracy: the prior kernel
``matmul_tf32x3_triton.py`` and kforge's NHWC convolution (:mod:`kforge.tools.gemm.conv`) (3xTF32,
tile sizes autotuned) in place of each large fp32 matmul (``tf32x3-gemm``) or Conv2d (``tf32x3-conv``).

An FX pass, run after the algebraic rewrites, swaps every nn.Linear, F.linear, matmul /
mm / bmm / ``@`` and matrix-shaped einsum whose shapes give the tensor cores enough work
(a wave of 128x128 output tiles, K >= 512) for a call to ``_kforge_mm3`` or
``_kforge_linear3``, which the candidate's prelude defines around the Triton kernel. An
activation that is the GEMM's only user (ReLU, GELU with erf or tanh) moves into the
kernel's epilogue, applied to the accumulator before the store: a transformer MLP's GELU
then costs no pass over its 4x-wide hidden activation (not yet timed on a GPU).
A convolution takes the eval-mode BatchNorm, a residual add and the ReLU after it the same
way (:mod:`.conv_fold`).

This is not a precision class: 3xTF32 keeps about 22 of fp32's 24 significand bits per
product and accumulates in fp32, and on KernelBench's GEMMs its error against a float64
product was below cuBLAS fp32's (docs/results.md). Every candidate still passes the
strict check, allclose at 1e-4 and the float64 error bound of the fp32 class, or is
rejected as precision lowered.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from . import conv_fold, fx_attention, fx_rewrite
from .corpus_kernels import prior_kernel
from .fx_rewrite import meta as _meta
from .source import Body, Spec
from .tf32x3_helpers import HELPERS, _kforge_linear3, _kforge_mm3, _kforge_sdpa3

KERNEL_FILE = "matmul_tf32x3_triton.py"
TILE = 128
MIN_TILES = 132  # one wave of 128x128 output tiles on an H100: fewer leave SMs idle
MIN_K = 512  # measured: K >= 1024 won on every KernelBench GEMM; K = 256 (L1 11's einsum) lost, 0.79x
ATTENTION_TILE = 64  # the flash kernel's smaller query tile
ATTENTION_MIN_KEYS = 64  # fewer keys than one key tile: little work per program
# Head dim 128, 4 x 16 heads x 2048 keys: 0.67x PyTorch's memory-efficient fp32 kernel (H200);
# head dim 64: 1.29-1.43x at GPT-2's and ViT's shapes. Grouped heads (Llama): 4.6x, since
# PyTorch runs grouped fp32 attention on its math path (bench/bench_tf32x3_attention.py).
ATTENTION_MAX_DIM = 64
MIN_SIDE = 64  # a narrower M or N wastes most of a tensor-core tile
# Fewer output tiles than a wave, but a K this long: the kernel splits K into slices that
# together fill the GPU (L1 6, 256 x 524288 x 256: 64 slices of 8192). Measured on the H200:
# 1.26 ms against cuBLAS FP32's 1.31 (1.03x); unsplit, the kernel took 7.9-14 ms.
MIN_SPLIT_K = 65536
EINSUM_MATMUL = re.compile(r"^\s*([a-z]*)([a-z])\s*,\s*\2([a-z])\s*->\s*\1\3\s*$")


def fuse_activation(gm: torch.fx.GraphModule, new: torch.fx.Node) -> bool:
    """Move the GEMM's activation into its epilogue when the activation is its only user."""
    user = fx_rewrite.sole_user(new)
    act = fx_rewrite.activation(gm, user) if user is not None else None
    if user is None or act is None:
        return False
    args = list(new.args) + [None] * (3 - len(new.args))
    new.args = (*args[:3], act)
    new.meta.update(user.meta)
    user.replace_all_uses_with(new)
    gm.graph.erase_node(user)
    return True


def worth_it(batch: int, m: int, k: int, n: int) -> bool:
    tiles = batch * -(-m // TILE) * -(-n // TILE)
    if min(m, n) < MIN_SIDE or k < MIN_K:
        return False
    # a split needs a 2-D GEMM and at least two slices of a multiple of the kernel's K_ALIGN (64)
    return tiles >= MIN_TILES or (batch == 1 and k >= MIN_SPLIT_K and k % (2 * 64) == 0)


def _gemm_shape(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int, int] | None:
    """(batch, M, K, N) of a @ b for the forms the helper takes, else None."""
    if a.dtype != torch.float32 or b.dtype != torch.float32 or a.dim() < 2 or b.dim() < 2:
        return None
    if a.dim() == b.dim() == 2:
        return 1, a.shape[0], a.shape[1], b.shape[1]
    if a.dim() == b.dim() == 3 and a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1]:
        return a.shape[0], a.shape[1], a.shape[2], b.shape[2]
    if b.dim() == 2 and a.shape[-1] == b.shape[0]:
        return 1, a.numel() // a.shape[-1], a.shape[-1], b.shape[1]
    return None


SDPAS = (
    torch.nn.functional.scaled_dot_product_attention,
    torch.ops.aten.scaled_dot_product_attention.default,
)
SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
SDPA_DEFAULTS = (None, None, None, None, 0.0, False, None, False)


@dataclasses.dataclass(frozen=True)
class Filled:
    """A boolean mask that a -inf fill read (``fx_attention.FILLED``), which the kernel takes as
    the additive mask ``where(mask, -inf, 0)``: the same scores, and a row that every key's fill
    reaches NaN, as the fill's softmax gives it."""

    mask: torch.fx.Node

    def additive(self, graph: torch.fx.Graph) -> torch.fx.Node:
        return graph.call_function(torch.where, (self.mask, -float("inf"), 0.0))


def _sdpa_call(node: torch.fx.Node) -> tuple[Any, ...] | None:
    """(q, k, v, is_causal, scale, bias or None) of a scaled_dot_product_attention the flash
    kernel computes (fp32, no mask but an additive fp32 one, no dropout, head dim <= 256,
    grouped heads only under enable_gqa, enough query tiles to fill the GPU), else None. The
    bias is the mask, or the bias the attention pass joined with a causal mask it proved
    (``fx_attention.CAUSAL_KEY_BIAS``): the kernel takes both, and never reads the joined one."""
    if node.op != "call_function" or node.target not in SDPAS:
        return None
    values = fx_rewrite.call_args(node, SDPA_ARGS, SDPA_DEFAULTS)
    if values is None:
        return None
    q, k, v, mask, dropout, causal, scale, gqa = values
    if dropout not in (0, 0.0) or not isinstance(causal, bool):
        return None
    if not (scale is None or isinstance(scale, float | int)) or not isinstance(gqa, bool):
        return None
    # Triton: imported when a graph is rewritten
    from ....tools.gemm.attention import unsupported, unsupported_rel

    # a floored mask (fx_attention.FLOORED): the kernel reads the original and keeps its fills finite
    bias, window = (mask.meta.get(fx_attention.FLOORED, mask) if isinstance(mask, torch.fx.Node) else mask), 0
    rel = mask.meta.get(fx_attention.DECOMPOSED) if isinstance(mask, torch.fx.Node) else None
    if rel is not None:  # the two tables, not the (L, S) mask of their sums
        bias = None
    elif isinstance(mask, torch.fx.Node) and mask.meta.get(fx_attention.CAUSAL_KEY_BIAS) is not None:
        bias, causal = mask.meta[fx_attention.CAUSAL_KEY_BIAS], True
    elif isinstance(mask, torch.fx.Node) and mask.meta.get(fx_attention.CAUSAL_WINDOW) and not causal:
        bias, causal, window = None, True, mask.meta[fx_attention.CAUSAL_WINDOW]
    elif isinstance(mask, torch.fx.Node) and mask.meta.get(fx_attention.FILLED) is not None:
        bias = Filled(mask.meta[fx_attention.FILLED])  # DistilBERT's padding: -inf where it is True
    qm, km, vm, bm = _meta(q), _meta(k), _meta(v), _meta(bias.mask if isinstance(bias, Filled) else bias)
    if isinstance(bias, Filled) and bm is not None:
        bm = bm.float()  # the additive mask the kernel gets
    if qm is None or km is None or vm is None or (bias is not None and bm is None):
        return None
    if unsupported(qm, km, vm, gqa, bm):
        return None
    if rel is not None:
        rhm, rwm = _meta(rel[0]), _meta(rel[1])
        if rhm is None or rwm is None or unsupported_rel(qm, km, rhm, rwm):
            return None
    if qm.dim() == 3:
        qm, km = qm.unsqueeze(1), km.unsqueeze(1)
    batch, heads, length, dim = qm.shape
    if batch * heads * -(-length // ATTENTION_TILE) < MIN_TILES or km.shape[2] < ATTENTION_MIN_KEYS:
        return None
    if dim > ATTENTION_MAX_DIM and heads == km.shape[1]:
        return None  # PyTorch's memory-efficient kernel wins there; grouped heads it runs as math
    if window:
        return q, k, v, causal, scale, None, window
    if rel is not None:
        return q, k, v, causal, scale, None, 0, None, *rel
    if bias is None:
        return q, k, v, causal, scale
    parts = _summands(bias, qm, km, vm)
    if parts is None:
        return q, k, v, causal, scale, bias
    return q, k, v, causal, scale, parts[0], 0, parts[1]


def _summands(bias: Any, qm: torch.Tensor, km: torch.Tensor, vm: torch.Tensor) -> tuple[Any, Any] | None:
    """(a, b) when the attention's mask is a + b with both fp32 masks of the scores, else None:
    T5's (1, H, L, S) position bias plus its (B, 1, 1, S) padding mask, which the kernel reads
    as they are (a tile and a row) instead of their (B, H, L, S) sum."""
    from ....tools.gemm.attention import unsupported

    if not isinstance(bias, torch.fx.Node) or bias.op != "call_function" or bias.kwargs:
        return None
    if bias.target not in (operator.add, torch.add) or len(bias.args) != 2:
        return None
    a, b = bias.args
    am, bm = _meta(a), _meta(b)
    if am is None or bm is None or unsupported(qm, km, vm, True, am) or unsupported(qm, km, vm, True, bm):
        return None
    return a, b


def replace_gemms(gm: torch.fx.GraphModule) -> int:
    fired = 0
    graph = gm.graph
    for node in list(graph.nodes):
        out = _meta(node)
        if out is None or out.dtype != torch.float32 or not node.users:
            continue
        parts = fx_rewrite._linear_parts(gm, node)
        sdpa = _sdpa_call(node)
        if sdpa is not None:
            with graph.inserting_before(node):
                sdpa = tuple(a.additive(graph) if isinstance(a, Filled) else a for a in sdpa)
                new = graph.create_node("call_function", _kforge_sdpa3, sdpa, name="sdpa3")
            new.meta.update(node.meta)
            node.replace_all_uses_with(new)
            graph.erase_node(
                node
            )  # FX keeps an unused ATen attention (its dropout is random): both would run
            fired += 1
            continue
        if parts is not None:
            x, weight, bias = parts
            xm, wm = _meta(x), _meta(weight) if weight.op != "get_attr" else _attr(gm, weight)
            if xm is None or wm is None or wm.dim() != 2:
                continue
            shape = _gemm_shape(xm, wm.t())
            if shape is None or not worth_it(*shape):
                continue
            with graph.inserting_before(node):
                args = (x, weight, bias) if bias is not None else (x, weight)
                new = graph.create_node("call_function", _kforge_linear3, args, name="gemm3")
        else:
            operands = _matmul_operands(node)
            if operands is None:
                continue
            am, bm = _meta(operands[0]), _meta(operands[1])
            shape = _gemm_shape(am, bm) if am is not None and bm is not None else None
            if shape is None or not worth_it(*shape):
                continue
            with graph.inserting_before(node):
                new = graph.create_node("call_function", _kforge_mm3, operands, name="gemm3")
        new.meta.update(node.meta)  # the same output: a GEMM after it still sees its input's shape
        node.replace_all_uses_with(new)
        fuse_activation(gm, new)
        fired += 1
    return fired


def _attr(gm: torch.fx.GraphModule, node: torch.fx.Node) -> torch.Tensor | None:
    try:
        value = gm.get_parameter(str(node.target))
    except AttributeError:
        return None
    return value.detach().to("meta")


def _matmul_operands(node: torch.fx.Node) -> tuple[Any, ...] | None:
    """(a, b) of a matmul, or (a, b, bias) of an addmm with a vector bias; the ATen forms too
    (a region of a user's model captured by torch.export is ATen calls)."""
    aten = torch.ops.aten
    matmuls = (
        torch.matmul,
        torch.mm,
        torch.bmm,
        operator.matmul,
        aten.mm.default,
        aten.bmm.default,
        aten.matmul.default,
    )
    if (
        fx_rewrite._is_call(node, matmuls, ("matmul", "mm", "bmm"))
        and len(node.args) == 2
        and not node.kwargs
    ):
        return node.args[0], node.args[1]
    if (
        fx_rewrite._is_call(node, (torch.addmm, aten.addmm.default))
        and len(node.args) == 3
        and not node.kwargs
    ):
        bias = _meta(node.args[0])
        if bias is not None and bias.dim() == 1:
            return node.args[1], node.args[2], node.args[0]  # addmm(bias, a, b) = a @ b + bias
        return None
    if fx_rewrite._is_call(node, (torch.einsum,)) and len(node.args) == 3 and isinstance(node.args[0], str):
        if EINSUM_MATMUL.match(node.args[0]):
            return node.args[1], node.args[2]
    return None


@dataclasses.dataclass(frozen=True)
class _Family:
    """One kernel family: the FX pass that fires for it, the prior kernel and the wrappers
    its calls need, and how its candidates show in a plan."""

    name: str  # the ranker family and the tag
    body: str  # Spec.body
    pass_name: str  # as it shows in the fired passes
    replace: Callable[[torch.fx.GraphModule], int]
    kernel_file: str
    wrappers: str  # module-level source of the functions the pass calls
    helpers: dict[str, Callable[..., Any]]
    note: str
    flash: bool = True  # its pass puts attention on the flash kernel (which reads decomposed positions)


def _kernel_attention(gm: torch.fx.GraphModule, decomposed: bool = True) -> int:
    """The attention pass, leaving alone an attention whose head dim is above the flash
    kernel's: its two matmuls stay matmuls, for the GEMM (SD VAE's single head of 512: 3xTF32
    GEMMs instead of PyTorch's fp32 math path). ``decomposed``: decomposed relative positions
    too, for a family whose pass then puts them on the flash kernel."""
    from ....tools.gemm.attention import MAX_HEAD_DIM  # Triton: imported when a graph is rewritten

    return fx_attention.sdpa_attention(gm, MAX_HEAD_DIM, decomposed)


def _convs_and_gemms(gm: torch.fx.GraphModule) -> int:
    """The convolutions on the 3xTF32 convolution, then the GEMMs and attention that qualify on
    the 3xTF32 GEMM and flash kernels (a vision block with attention needs both)."""
    convs = conv_fold.replace_convs(gm)
    return convs + replace_gemms(gm) if convs else 0


GEMM = _Family(
    "tf32x3-gemm", "tf32x3", "tf32x3", replace_gemms, KERNEL_FILE, HELPERS,
    {"_kforge_mm3": _kforge_mm3, "_kforge_linear3": _kforge_linear3, "_kforge_sdpa3": _kforge_sdpa3},
    "fp32 GEMMs and attention on tensor cores at fp32 accuracy (3xTF32 Triton kernels, tiles autotuned)",
)  # fmt: skip
CONV = _Family(
    "tf32x3-conv", "tf32x3-conv", "tf32x3-conv", _convs_and_gemms, KERNEL_FILE,
    conv_fold.CONV_HELPERS.strip("\n") + "\n\n" + HELPERS, {**conv_fold.HELPERS, **GEMM.helpers},
    "fp32 convolutions on tensor cores at fp32 accuracy (3xTF32 implicit GEMM; bias, an eval-mode"
    " BatchNorm and a ReLU fused; tiles autotuned), with the GEMMs and attention that qualify on"
    " the 3xTF32 GEMM and flash kernels",
)  # fmt: skip


Buffers = Callable[[], dict[str, torch.Tensor]] | None  # the model's buffer values, on demand


def _rewrite(
    family: _Family,
    model: torch.nn.Module,
    inputs: list[Any],
    buffers: Buffers = None,
    decomposed: bool = True,
) -> tuple[Body, list[str]] | None:
    """The forward with the family's layers on its kernel (after the algebraic rewrites), or
    None when none qualifies. ``decomposed``: decomposed relative positions on the flash kernel
    too (where the family's is one); without, such an attention is left as written."""
    attention: Callable[[torch.fx.GraphModule], int] = functools.partial(
        _kernel_attention, decomposed=family.flash and decomposed
    )
    passes = {**fx_rewrite.PASSES, "attention-sdpa": attention, family.pass_name: family.replace}
    result = fx_rewrite.rewrite(model, inputs, passes, family.helpers, buffers)
    if result is None or family.pass_name not in result[1]:
        return None
    body, fired = result
    kernel = prior_kernel(family.kernel_file) if family.kernel_file else ""  # "": kforge's own module
    parts = (body.prelude, kernel, family.wrappers.strip("\n"))
    return Body(method=body.method, prelude="\n\n".join(p for p in parts if p)), fired


def _spec(family: _Family, fired: list[str]) -> Spec:
    algebra = [f for f in fired if f != family.pass_name]
    return Spec(
        family=family.name,
        body=family.body,
        tag=family.name + (f"[{','.join(algebra)}]" if algebra else ""),
        note=family.note,
    )


def rewrite(
    model: torch.nn.Module, inputs: list[Any], buffers: Buffers = None, decomposed: bool = True
) -> tuple[Body, list[str]] | None:
    """The forward with its large fp32 GEMMs on the 3xTF32 kernel, or None."""
    return _rewrite(GEMM, model, inputs, buffers, decomposed)


_SDPA3_CALL = re.compile(r"_kforge_sdpa3\(([^()]*)\)")


def reads_relpos(body: Body) -> bool:
    """Whether the body hands the flash kernel decomposed relative positions (its last two
    arguments, rel_h and rel_w, not None)."""
    return any(call.split(", ")[-1] != "None" for call in _SDPA3_CALL.findall(body.method))


def rewrite_convs(
    model: torch.nn.Module, inputs: list[Any], buffers: Buffers = None
) -> tuple[Body, list[str]] | None:
    """The forward with its large fp32 Conv2d layers on the 3xTF32 implicit-GEMM kernel, or None."""
    return _rewrite(CONV, model, inputs, buffers)


def spec(fired: list[str]) -> Spec:
    return _spec(GEMM, fired)


def conv_spec(fired: list[str]) -> Spec:
    return _spec(CONV, fired)
