"""kforge's rotary template (tools/rotary.py) and its FX pass (strategies/templates.py): the kernel
matches float64 within eager's error on full and partial rotaries, broadcast and strided
tables, under Triton's interpreter; the pass finds transformers' and GPT-NeoX's forms in the
orders models write them and leaves alone what is not a rotary. (The candidate through the
engine: tests/test_templates.py.)"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from kforge.agent.policy.strategies import templates

PRELUDE = """
import torch
from kforge.tools import rotary as r
torch.manual_seed(0)
"""


def test_the_kernel_matches_float64_on_full_partial_broadcast_and_strided_rotaries(interpreted):
    code = """
def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)

def rotate_every_two(x):
    return torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)

def reference(x, cos, sin, interleaved=False):
    rot = cos.shape[-1]
    turn = rotate_every_two if interleaved else rotate_half
    out = x[..., :rot] * cos + turn(x[..., :rot]) * sin
    return torch.cat((out, x[..., rot:]), -1)

failed = []
def check(x, cos, sin, label, interleaved=False):
    want = reference(x.double(), cos.double(), sin.double(), interleaved)
    err = lambda y: float((y.double() - want).abs().max())
    got = r.rotary(x, cos, sin, interleaved)
    if got.shape != x.shape or not got.is_contiguous():
        failed.append((label, "shape or layout", tuple(got.shape)))
    mine, eager = err(got), err(reference(x, cos, sin, interleaved))
    if not mine <= max(2 * eager, 2e-7):  # a NaN fails too
        failed.append((label, mine, eager))

angles = torch.randn(2, 7, 8) * 3
check(torch.randn(2, 3, 7, 8), angles.cos()[:, None], angles.sin()[:, None], "llama: (B, 1, S, D) tables")
table = torch.randn(7, 6) * 3
check(torch.randn(2, 3, 7, 16), table.cos()[None, None], table.sin()[None, None], "neox: 6 of 16 rotated")
check(torch.randn(5, 7, 10), table.cos(), table.sin(), "3-D x, 2-D tables, odd half 3")
strided = torch.randn(2, 7, 3, 8).transpose(1, 2)  # (B, S, H, D) viewed as (B, H, S, D)
check(strided, angles.cos()[:, None], angles.sin()[:, None], "transposed x")
wide = torch.randn(2, 7, 16) * 3
check(torch.randn(2, 3, 7, 8), wide.cos()[..., :8][:, None], wide.sin()[..., :8][:, None], "strided tables")
check(torch.randn(9, 4), torch.randn(9, 4), torch.randn(9, 4), "2-D")
per_head = torch.randn(2, 3, 7, 8) * 3  # a table for each head
check(torch.randn(2, 3, 7, 8), per_head.cos(), per_head.sin(), "tables per head")
check(torch.randn(2, 5, 7, 12), angles.cos()[:, None], angles.sin()[:, None], "5 heads, 8 of 12 rotated")
# a launch's plan is kept by signature: new values under one signature are computed anew
check(torch.randn(2, 5, 7, 12), (angles * 2).cos()[:, None], (angles * 2).sin()[:, None], "same signature")
columns = torch.randn(2, 3, 8, 7).transpose(-1, -2)  # x's last stride is not 1: copied first
check(columns, angles.cos()[:, None], angles.sin()[:, None], "x's last stride 7")
# GPT-J's rotate_every_two: tables repeated per pair (its repeat_interleave), a partial rotary,
# and tables that differ within a pair (the kernel reads each column's own cos and sin)
pairs = (torch.randn(2, 7, 4) * 3).repeat_interleave(2, -1)
check(torch.randn(2, 3, 7, 8), pairs.cos()[:, None], pairs.sin()[:, None], "gpt-j", True)
check(torch.randn(2, 7, 3, 16), pairs.cos()[:, :, None], pairs.sin()[:, :, None], "gpt-j: 8 of 16", True)
check(torch.randn(2, 3, 7, 8), angles.cos()[:, None], angles.sin()[:, None], "interleaved, own tables", True)
six = (torch.randn(2, 7, 6) * 3).repeat_interleave(2, -1)  # 6 pairs: the tile of 16 columns masked past 12
check(torch.randn(2, 3, 7, 20), six.cos()[:, None], six.sin()[:, None], "gpt-j: 12 of 20", True)
for _ in range(2):  # a refused call is refused again: nothing of it is kept
    try:
        r.rotary(torch.randn(2, 8), torch.randn(2, 5), torch.randn(2, 5))
        failed.append("an odd rotated width was taken")
    except ValueError:
        pass
try:
    r.rotary(torch.randn(2, 3, 8), torch.randn(2, 8), torch.randn(2, 8))  # (2,) against (2, 3)
    failed.append("tables that do not broadcast were taken")
except ValueError:
    pass
print(failed)
"""
    assert interpreted(PRELUDE + code) == "[]"


def test_the_autotuner_times_only_tiles_that_spread_over_their_threads():
    from kforge.tools import rotary

    configs = rotary._configs()
    for half, rest, interleaved in (
        (64, 1, False),
        (16, 128, False),
        (4, 1, False),
        (32, 256, True),
        (64, 1, True),
    ):
        kept = rotary._fitting(configs, {}, BLOCK_H=half, BLOCK_P=rest, INTERLEAVED=interleaved)
        width = max(half * (2 if interleaved else 1), rest)  # interleaved: one tile of both columns
        assert kept and all(
            rotary.MIN_PER_THREAD <= c.kwargs["BLOCK_R"] * width / (32 * c.num_warps) <= rotary.PER_THREAD
            for c in kept
        ), (half, rest, kept)
    (wide,) = rotary._fitting(
        configs, {}, BLOCK_H=1 << 14, BLOCK_P=1, INTERLEAVED=False
    )  # fits no tile: one row, most warps
    assert wide.kwargs["BLOCK_R"] == 1 and wide.num_warps == 8


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Llama(nn.Module):
    def forward(self, q, k, cos, sin):
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        # the second written the other way round: sin times the turned half first, then cos
        return q * cos + rotate_half(q) * sin, sin * rotate_half(k) + cos * k


class NeoX(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cos", torch.randn(1, 1, 6, 4))
        self.register_buffer("sin", torch.randn(1, 1, 6, 4))

    def forward(self, q):
        q_rot, q_pass = q[:, :, :, :4], q[..., 4:]  # the first slice written out dim by dim
        q_rot = q_rot * self.cos + torch.cat((-q_rot[..., 2:], q_rot[..., :2]), dim=3) * self.sin
        return torch.cat((q_rot, q_pass), dim=-1)


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    x1 = x[:, :, :, ::2]  # GPT-J's slices, written out dim by dim
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


class GPTJ(nn.Module):
    """transformers' GPT-J attention: the rotary over the first 4 of 8 columns, then the rest."""

    def forward(self, k, sin, cos):
        sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
        cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
        k_rot, k_pass = k[:, :, :, :4], k[:, :, :, 4:]
        k_rot = (k_rot * cos) + (rotate_every_two(k_rot) * sin)
        return torch.cat([k_rot, k_pass], dim=-1)


class NotEveryTwo(nn.Module):
    def forward(self, q, cos, sin):
        swapped = q * cos + torch.stack((q[..., ::2], -q[..., 1::2]), -1).flatten(-2) * sin
        unflattened = torch.stack((-q[..., 1::2], q[..., ::2]), -2).flatten(-2)  # stacked on the wrong dim
        return swapped, q * cos + unflattened * sin


class NotRotaries(nn.Module):
    def forward(self, q, k, cos, sin, one):
        wrong_order = q * cos + torch.cat((q[..., :4], -q[..., 4:]), -1) * sin
        other_tensor = q * cos + rotate_half(k) * sin
        column_table = q * one + rotate_half(q) * one  # cos of one column, broadcast along it
        doubled = q.double() * cos.double() + rotate_half(q.double()) * sin.double()
        return wrong_order, other_tensor, column_table, doubled


def _method(model: nn.Module, *shapes: tuple[int, ...]) -> str:
    inputs = [torch.randn(s, device="meta") for s in shapes]
    result = templates.rewrite(model.to("meta"), inputs, lambda: dict(model.named_buffers()))
    return "" if result is None else result[0].method


def test_the_pass_finds_transformers_and_neox_rotaries_in_either_order():
    llama = _method(Llama(), (2, 4, 6, 8), (2, 2, 6, 8), (2, 6, 8), (2, 6, 8))
    assert llama.count("_kforge_rotary(") == 2 and "cat(" not in llama and "neg(" not in llama, llama
    assert (
        "_kforge_rotary(q, unsqueeze, unsqueeze_1)" in llama
        and "_kforge_rotary(k, unsqueeze, unsqueeze_1)" in llama
    )
    neox = _method(NeoX(), (2, 3, 6, 10))
    assert neox.count("_kforge_rotary(") == 1 and "cat(" not in neox and "getitem" not in neox, neox
    assert "_kforge_rotary(q, cos, sin)" in neox, neox


def test_the_pass_finds_gptjs_interleaved_partial_rotary():
    gptj = _method(GPTJ(), (2, 6, 3, 8), (2, 6, 2), (2, 6, 2))
    assert gptj.count("_kforge_rotary(") == 1 and "stack(" not in gptj and "cat(" not in gptj, gptj
    assert ", True)" in gptj.split("_kforge_rotary(")[1].split("\n")[0], gptj
    assert "_kforge_rotary(" not in _method(NotEveryTwo(), (2, 3, 6, 8), (2, 1, 6, 8), (2, 1, 6, 8))


def test_the_pass_leaves_alone_what_is_not_a_rotary():
    assert "_kforge_rotary" not in _method(
        NotRotaries(), (2, 3, 6, 8), (2, 3, 6, 8), (2, 1, 6, 8), (2, 1, 6, 8), (2, 1, 6, 1)
    )


@pytest.mark.gpu
def test_on_the_gpu_the_rotary_kernel_matches_eager_within_fp32s_error() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from kforge.tools.rotary import rotary

    angles = torch.randn(4, 2048, 128, device="cuda") * 3
    q = torch.randn(4, 32, 2048, 128, device="cuda")
    cos, sin = angles.cos()[:, None], angles.sin()[:, None]
    want = q.double() * cos.double() + rotate_half(q.double()) * sin.double()
    eager = q * cos + rotate_half(q) * sin
    err = lambda y: float((y.double() - want).abs().max())  # noqa: E731
    assert err(rotary(q, cos, sin)) <= max(2 * err(eager), 2e-7)
