"""Rotary position embedding, ``x * cos + rotate_half(x) * sin`` (or GPT-J's interleaved
``rotate_every_two``), in Triton, strict fp32; a partial rotary's pass-through columns are
copied in the same pass.

transformers writes it as two products, two half slices, a negation, a concatenation and a
sum; GPT-NeoX and GPT-J apply it to the first ``rot`` columns of each head and concatenate the
rest back. torch.compile fuses that into one kernel. Here one program takes a block of rows
(one row: one head of one position); each row reads its pairs of columns (j and j + rot / 2,
or 2j and 2j + 1 interleaved), the same columns of ``cos`` and ``sin`` (broadcast rows are read
through stride 0, so a (positions, rot) table is read from L2), and writes both output columns
of each pair and the pass-through. On an H100 (ncu, docs/results.md) this kernel and Inductor's
both run at the copy's bandwidth (91.6 and 89.4 us on Llama 3 8B's queries); what decides a
call is the host's time before the launch, which the launch plan kept by signature keeps at a
few microseconds (1.12-1.15x of compile in bench_templates.py, 1.22-1.24x on the rotary
development tasks).

The arithmetic is eager's: ``out[a] = x[a] * cos[a] + (-x[b]) * sin[a]`` and ``out[b] = x[b] *
cos[b] + x[a] * sin[b]`` for each pair (a, b), in fp32 (the compiler may contract a product and
its sum into one rounding: closer to float64, never further than eager's two).

kforge's own kernel, tested against float64 and eager under Triton's interpreter
(tests/test_rotary.py); candidates call ``rotary`` (the custom op ``kforge::rotary`` under
torch.compile).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from .launch import Tuned, cdiv, eager_or_op, next_power_of_2


@triton.jit
def _pairs(row_ptr, cols, mask, BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr):
    """Columns 2j and 2j + 1 of each row, loaded as one contiguous tile and split in registers."""
    tile = tl.load(row_ptr + cols[None, :], mask=mask, other=0.0)
    return tl.split(tl.reshape(tile, (BLOCK_R, BLOCK_H, 2)))


@triton.jit
def rotary_kernel(
    x_ptr, c_ptr, s_ptr, y_ptr, ROWS, H, S,
    sxb, sxh, sxs, scb, sch, scs, ssb, ssh, sss, syb, syh, sys,
    HALF: tl.constexpr, REST: tl.constexpr, INTERLEAVED: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_P: tl.constexpr,
):  # fmt: skip
    """Rows (b, h, s) of x (B, H, S, 2 * HALF + REST) and of cos and sin (B, H, S, 2 * HALF,
    strides 0 where broadcast); each dimension's last stride is 1. BLOCK_R rows a program
    (autotuned). Column j is paired with j + HALF (rotate_half), or with INTERLEAVED, column
    2j with 2j + 1 (GPT-J's rotate_every_two); the arithmetic on a pair is the same."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    live = rows < ROWS
    s = rows % S
    bh = rows // S
    h = bh % H
    b = bh // H
    xb = (b * sxb + h * sxh + s * sxs)[:, None]
    cb = (b * scb + h * sch + s * scs)[:, None]
    sb = (b * ssb + h * ssh + s * sss)[:, None]
    yb = (b * syb + h * syh + s * sys)[:, None]
    if INTERLEAVED:  # a pair is columns 2j and 2j + 1: the row read and written whole, split in registers
        cols = tl.arange(0, 2 * BLOCK_H)
        mask = live[:, None] & (cols < 2 * HALF)[None, :]
        x1, x2 = _pairs(x_ptr + xb, cols, mask, BLOCK_R, BLOCK_H)
        c1, c2 = _pairs(c_ptr + cb, cols, mask, BLOCK_R, BLOCK_H)
        s1, s2 = _pairs(s_ptr + sb, cols, mask, BLOCK_R, BLOCK_H)
        y = tl.join(x1 * c1 + (-x2) * s1, x2 * c2 + x1 * s2)
        tl.store(y_ptr + yb + cols[None, :], tl.reshape(y, (BLOCK_R, 2 * BLOCK_H)), mask=mask)
    else:  # columns j and j + HALF
        cols = tl.arange(0, BLOCK_H)
        mask = live[:, None] & (cols < HALF)[None, :]
        x1 = tl.load(x_ptr + xb + cols[None, :], mask=mask, other=0.0)
        x2 = tl.load(x_ptr + xb + HALF + cols[None, :], mask=mask, other=0.0)
        c1 = tl.load(c_ptr + cb + cols[None, :], mask=mask, other=0.0)
        c2 = tl.load(c_ptr + cb + HALF + cols[None, :], mask=mask, other=0.0)
        s1 = tl.load(s_ptr + sb + cols[None, :], mask=mask, other=0.0)
        s2 = tl.load(s_ptr + sb + HALF + cols[None, :], mask=mask, other=0.0)
        tl.store(y_ptr + yb + cols[None, :], x1 * c1 + (-x2) * s1, mask=mask)
        tl.store(y_ptr + yb + HALF + cols[None, :], x2 * c2 + x1 * s2, mask=mask)
    if REST > 0:  # a partial rotary: the columns after the rotated ones, copied
        rest = tl.arange(0, BLOCK_P)
        keep = live[:, None] & (rest < REST)[None, :]
        xr = xb + 2 * HALF + rest[None, :]
        yr = yb + 2 * HALF + rest[None, :]
        tl.store(y_ptr + yr, tl.load(x_ptr + xr, mask=keep, other=0.0), mask=keep)


def _configs() -> list[triton.Config]:
    # rows per program and warps; tuned per shape (the autotuner's key)
    return [
        triton.Config({"BLOCK_R": r}, num_warps=w) for r in (1, 2, 4, 8, 16, 32, 64) for w in (1, 2, 4, 8)
    ]


PER_THREAD = 64  # values of one operand's tile a thread holds, at most
MIN_PER_THREAD = 4  # and at least: fewer leave threads with nothing to load


def _fitting(configs: list[triton.Config], args: dict[str, Any], **constexprs: Any) -> list[triton.Config]:
    """The tiles whose values spread over the program's threads without spilling or idling."""
    # interleaved, a row's pairs are one tile of both columns
    pairs = constexprs["BLOCK_H"] * (2 if constexprs["INTERLEAVED"] else 1)
    width = max(pairs, constexprs["BLOCK_P"])
    fit = [
        c
        for c in configs
        if MIN_PER_THREAD * 32 * c.num_warps <= c.kwargs["BLOCK_R"] * width <= PER_THREAD * 32 * c.num_warps
    ]
    return fit or [c for c in configs if c.kwargs["BLOCK_R"] == 1][-1:]  # a wide head: one row, most warps


_kernel = Tuned(
    rotary_kernel, _configs(), ["ROWS", "H", "S", "scb", "sch", "scs"], {"BLOCK_R": 4}, prune=_fitting
)


def _as_4d(t: torch.Tensor) -> torch.Tensor:
    """A view with size-1 leading dimensions up to four, its last stride 1 (a copy otherwise)."""
    t = t.reshape((1,) * (4 - t.dim()) + tuple(t.shape)) if t.dim() < 4 else t
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


def _check(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> int:
    """The rotated width; raises on what the kernel does not compute."""
    tensors = (x, cos, sin)
    if any(t.dtype != torch.float32 for t in tensors) or not 1 <= x.dim() <= 4:
        raise ValueError("kforge::rotary: fp32 x of 1 to 4 dimensions; call the PyTorch expression instead")
    rot = cos.shape[-1] if cos.dim() else 0
    if cos.shape != sin.shape or rot % 2 or not 0 < rot <= x.shape[-1] or cos.dim() > x.dim():
        raise ValueError(
            f"kforge::rotary: cos and sin of one shape, an even last dim up to x's {x.shape[-1]} "
            f"(cos {tuple(cos.shape)}, sin {tuple(sin.shape)})"
        )
    lead, table = x.shape[:-1], cos.shape[:-1]
    if any(t not in (1, n) for t, n in zip(reversed(table), reversed(lead), strict=False)):
        raise ValueError(f"kforge::rotary: cos {tuple(cos.shape)} does not broadcast to x {tuple(x.shape)}")
    return rot


# What a call's launch needs, by the operands' shapes, strides and dtypes (a model calls it
# with the same few signatures): (the launch's key, the sizes and strides it passes, its
# constexprs, its grid), or None where an operand needs a copy (no last stride of 1) or the
# output is empty. The checks and the 4-D views took most of the host time of a call (62 us on
# a 2-core CPU host, the kernel launch left out, against 6.6 with this).
Plan = tuple[Any, tuple[int, ...], dict[str, int], Any] | None
_plans: dict[tuple[Any, ...], Plan] = {}
MAX_PLANS = 256


def _plan(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> Plan:
    rot = _check(x, cos, sin)
    lead = x.shape[:-1]
    c, s = cos.expand(*lead, rot), sin.expand(*lead, rot)
    if x.numel() == 0 or any(t.stride(-1) != 1 and t.shape[-1] != 1 for t in (x, c, s)):
        return None
    x4, c4, s4 = _as_4d(x), _as_4d(c), _as_4d(s)
    batch, heads, positions, width = x4.shape
    rows = batch * heads * positions
    half, rest = rot // 2, width - rot
    y_strides = (heads * positions * width, positions * width, width)  # the output is contiguous
    strides = (*x4.stride()[:3], *c4.stride()[:3], *s4.stride()[:3], *y_strides)
    constexprs = {
        "HALF": half,
        "REST": rest,
        "INTERLEAVED": interleaved,
        "BLOCK_H": next_power_of_2(half),
        "BLOCK_P": next_power_of_2(max(rest, 1)),
    }
    # the strides in the key: broadcast tables tune apart
    return (
        (rows, heads, positions, half, rest, interleaved, strides),
        (rows, heads, positions, *strides),
        constexprs,
        (lambda meta: (cdiv(rows, meta["BLOCK_R"]),)),
    )


def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """``x[..., :rot] * cos + rotate_half(x[..., :rot]) * sin`` (``rotate_every_two`` with
    ``interleaved``) with ``x[..., rot:]`` after it, for ``rot = cos.shape[-1]``; the result is
    contiguous."""
    signature = (
        interleaved,
        x.shape,
        x.stride(),
        cos.shape,
        cos.stride(),
        sin.shape,
        sin.stride(),
        x.dtype,
        cos.dtype,
        sin.dtype,
    )
    if signature in _plans:
        plan = _plans[signature]
    else:
        plan = _plan(x, cos, sin, interleaved)  # raises on what the kernel does not compute: nothing kept
        if len(_plans) < MAX_PLANS:
            _plans[signature] = plan
    if plan is None:
        return _rotary_copied(x, cos, sin, interleaved)
    key, sizes, constexprs, grid = plan
    y = torch.empty(x.shape, device=x.device, dtype=torch.float32)
    # the operands themselves: their 4-D views (size-1 dims in front, expanded tables) start at
    # the same addresses, and the plan holds those views' strides
    _kernel(key, grid, x, cos, sin, y, *sizes, **constexprs)
    return y


def _rotary_copied(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """The slow path, for operands ``_plan`` checked: one whose last stride is not 1 is copied
    first; an empty x."""
    y = torch.empty(x.shape, device=x.device, dtype=torch.float32)
    if y.numel() == 0:
        return y
    lead, rot = x.shape[:-1], cos.shape[-1]
    x4, c4, s4 = _as_4d(x), _as_4d(cos.expand(*lead, rot)), _as_4d(sin.expand(*lead, rot))
    key, sizes, constexprs, grid = _plan(x4, c4, s4, interleaved)  # type: ignore[misc]
    _kernel(key, grid, x4, c4, s4, y, *sizes, **constexprs)
    return y


def _rotary_shape(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    return x.new_empty(x.shape)


rotary_op, _call = eager_or_op("kforge::rotary", _rotary, _rotary_shape)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False) -> torch.Tensor:
    """transformers' ``x * cos + rotate_half(x) * sin`` over x's first ``cos.shape[-1]``
    columns, the rest of x's columns after them unchanged (GPT-NeoX's partial rotary), for fp32
    tensors; cos and sin broadcast to x's leading dimensions. ``interleaved``: GPT-J's
    ``rotate_every_two`` (columns 2j and 2j + 1 turned as a pair) instead of ``rotate_half``."""
    return _call(x, cos, sin, interleaved)
