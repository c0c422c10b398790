"""kforge's 3xTF32 GEMM with the operands split before it (tools/gemm/tf32x3.py): the split
is exact TF32 and gives fp32 accuracy through a TF32 GEMM (emulated here: inputs truncated to
TF32 as the tensor cores read them), the kernel matches float64 under Triton's interpreter
with every epilogue, a weight's cached split is redone when the weight changes, and on the
GPU its error stays at fp32's."""

from __future__ import annotations

import pytest
import torch

CODE_PRELUDE = """
import torch
from kforge.tools.gemm import tf32x3 as t
torch.manual_seed(0)
rel = lambda y, ref: float((y.double() - ref).abs().max() / ref.abs().max())
"""


def test_the_split_is_exact_tf32_and_three_tf32_products_of_it_keep_fp32_accuracy(interpreted):
    code = """
a, w = torch.randn(3, 37, 301), torch.randn(45, 301)
tf32 = lambda x: (x.contiguous().view(torch.int32) & -8192).view(torch.float32)  # what tensor cores read
A, W = t.split(a), t.split(w.unsqueeze(0))[0]
kp = A.shape[2] // 2
exact = bool(torch.equal(tf32(A), A) and torch.equal(tf32(W), W))
pad = bool((A[..., 301:kp] == 0).all() and (A[..., kp + 301:] == 0).all())
ref = a.double() @ w.double().t()
mm = lambda x, y: tf32(x).double() @ tf32(y).double().t()
big, small = lambda x: x[..., :kp], lambda x: x[..., kp:]
three = mm(big(A), big(W)) + mm(big(A), small(W)) + mm(small(A), big(W))
one = mm(a, w)
wrong = mm(big(A), big(W)) + mm(small(A), small(W))  # the cross terms forgotten
print("x".join(map(str, A.shape)), exact, pad, rel(three, ref), rel(one, ref), rel(wrong, ref))
"""
    shape, exact, pad, three, one, wrong = interpreted(CODE_PRELUDE + code).split(" ")
    assert shape == "3x37x640" and exact == "True" and pad == "True"
    assert float(three) < 1e-6  # 3xTF32 keeps fp32's accuracy
    assert float(one) > 1e-4 and float(wrong) > 1e-4  # one TF32 pass, or a wrong sum, does not


def test_the_kernel_matches_float64_with_every_epilogue_and_a_changed_weight_is_split_again(interpreted):
    code = """
import torch.nn.functional as F
lin = torch.nn.Linear(301, 45)
x = torch.randn(2, 37, 301)
acts = {None: lambda y: y, "relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
        "silu": F.silu}
worst = 0.0
for act, fn in acts.items():
    ref = fn(x.double() @ lin.weight.double().t() + lin.bias.double())
    y = t.matmul(x, lin.weight.t().unsqueeze(0), lin.bias, act)
    worst = max(worst, rel(y, ref), key=lambda v: (v != v, v))  # a NaN wins
b = torch.randn(2, 301, 20)  # a B per batch, not a parameter, no bias
worst = max(worst, rel(t.matmul(x, b), x.double() @ b.double()), key=lambda v: (v != v, v))  # a NaN wins
cached = lin.weight._kforge_tf32x3_split[1]
t.matmul(x, lin.weight.t().unsqueeze(0))
reused = lin.weight._kforge_tf32x3_split[1] is cached
with torch.no_grad():
    lin.weight.mul_(-2.0)
ref = x.double() @ lin.weight.double().t()
after = rel(t.matmul(x, lin.weight.t().unsqueeze(0)), ref)
try:
    t.matmul(x, b, act="swish")
except ValueError as err:
    refused = "unknown activation" in str(err)
print(worst, reused, after, refused)
"""
    worst, reused, after, refused = interpreted(CODE_PRELUDE + code).split(" ")
    assert float(worst) < 1e-6 and float(after) < 1e-6
    assert reused == "True" and refused == "True"


@pytest.mark.gpu
def test_on_the_gpu_the_error_stays_at_fp32s_with_every_epilogue_and_no_flag_is_touched():
    from kforge.tools.gemm import tf32x3 as t

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    lin = torch.nn.Linear(3072, 768).cuda()
    x = torch.randn(2, 700, 3072, device="cuda")
    acts = {None: lambda y: y, "relu": torch.relu, "gelu": torch.nn.functional.gelu,
            "gelu_tanh": lambda y: torch.nn.functional.gelu(y, approximate="tanh"),
            "silu": torch.nn.functional.silu}  # fmt: skip
    with torch.no_grad():
        fp32_err = None
        for act, fn in acts.items():
            ref = fn(x.double() @ lin.weight.double().t() + lin.bias.double())
            y = t.matmul(x, lin.weight.t().unsqueeze(0), lin.bias, act)
            err = float((y.double() - ref).norm() / ref.norm())
            fp32 = fn(torch.nn.functional.linear(x, lin.weight, lin.bias))
            fp32_err = float((fp32.double() - ref).norm() / ref.norm())
            assert err < 1.5 * fp32_err + 1e-8, (act, err, fp32_err)  # as accurate as cuBLAS fp32
            assert torch.allclose(y, fp32, atol=1e-4, rtol=1e-4)
    assert torch.backends.cuda.matmul.allow_tf32 is False


def test_under_torch_compile_the_gemms_are_ops_in_one_graph_with_no_break(interpreted):
    """The linear and mm ops are custom ops with shapes for the compiler: a block of two GEMMs
    and elementwise work between them compiles to one graph, and computes what eager does."""
    code = """
import torch._dynamo
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.proj = torch.nn.Linear(100, 64), torch.nn.Linear(64, 100)
    def forward(self, x, b):
        h = t.linear(x, self.fc.weight, self.fc.bias, "gelu")
        return t.linear(torch.tanh(h) * 2.0, self.proj.weight, self.proj.bias, "") + t.mm(x, b, None, "relu")
block, x, b = Block(), torch.randn(3, 7, 100), torch.randn(100, 100)
explained = torch._dynamo.explain(block)(x, b)
with torch.no_grad():
    ref = block(x, b).double()
    got = torch.compile(block)(x, b).double()
print(explained.graph_count, explained.graph_break_count, rel(got, ref))
"""
    graphs, breaks, err = interpreted(CODE_PRELUDE + code).split(" ")
    assert graphs == "1" and breaks == "0" and float(err) < 1e-6
