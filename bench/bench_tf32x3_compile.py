"""The 3xTF32 GEMMs under torch.compile (GPU): twelve GPT-2 MLP blocks (LayerNorm, Linear +
tanh GELU, Linear, residual) on ``linear_tf32x3`` (kforge's custom ops), eager against
torch.compile default and reduce-overhead: the graph count, graph breaks, and wall-clock
milliseconds per forward (mean of 30 after 5 warm-ups).

    python bench/bench_tf32x3_compile.py
"""

from __future__ import annotations

import sys
import time

import torch
import torch._dynamo
import torch.nn as nn
from common import header, print_table
from kforge.examples import ROOT as EXAMPLES

sys.path.insert(0, str(EXAMPLES / "candidates"))
import matmul_tf32x3_triton as mt  # noqa: E402


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(768)
        self.fc, self.proj = nn.Linear(768, 3072), nn.Linear(3072, 768)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = mt.linear_tf32x3(self.ln(x), self.fc.weight, self.fc.bias, act="gelu_tanh")
        return mt.linear_tf32x3(h, self.proj.weight, self.proj.bias) + x


def per_call_ms(fn, x: torch.Tensor, n: int = 30) -> float:
    for _ in range(5):
        fn(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n * 1e3


def main() -> None:
    print(header("python bench/bench_tf32x3_compile.py"))
    torch.backends.cuda.matmul.allow_tf32 = False
    model = nn.Sequential(*[MLP() for _ in range(12)]).cuda().eval()
    x = torch.randn(8, 512, 768, device="cuda")
    rows = []
    with torch.no_grad():
        explained = torch._dynamo.explain(model)(x)
        ref = model(x)
        rows.append(["eager", "-", "-", f"{per_call_ms(model, x):.3f}", "-"])
        for mode in ("default", "reduce-overhead"):
            torch._dynamo.reset()
            compiled = torch.compile(model, mode=mode)
            err = float((compiled(x) - ref).abs().max())
            rows.append([f"torch.compile {mode}", str(explained.graph_count), str(explained.graph_break_count),
                         f"{per_call_ms(compiled, x):.3f}", f"{err:.1e}"])  # fmt: skip
    print_table(
        "12 GPT-2 MLP blocks on the 3xTF32 ops", ["variant", "graphs", "breaks", "ms", "max |diff|"], rows
    )


if __name__ == "__main__":
    main()
