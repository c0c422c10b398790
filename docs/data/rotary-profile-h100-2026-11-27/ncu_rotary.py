"""ncu of the rotary template's kernel and torch.compile's fused kernel on the Llama 3 8B
queries (4 x 32 x 2048 x 128, tables (4, 1, 2048, 128)) and NeoX's partial rotary; warmed up
(autotuned, compiled) before the profiled range."""
import sys
import torch
sys.path.insert(0, "bench")
from bench_templates import _neox, _rotate_half
from kforge.tools.rotary import rotary

def rope1(q, cos, sin):
    return q * cos + _rotate_half(q) * sin

dev = "cuda"
angles = torch.randn(4, 2048, 128, device=dev) * 3
cos, sin = angles.cos()[:, None], angles.sin()[:, None]
q = torch.randn(4, 32, 2048, 128, device=dev)
table = torch.randn(2048, 32, device=dev) * 3
ncos, nsin = table.cos()[None, None], table.sin()[None, None]
nq = torch.randn(4, 32, 2048, 128, device=dev)
crope, cneox = torch.compile(rope1), torch.compile(_neox)
for _ in range(3):
    rotary(q, cos, sin); crope(q, cos, sin); rotary(nq, ncos, nsin); cneox(nq, ncos, nsin)
torch.cuda.synchronize()
torch.cuda.profiler.start()
for f, args in ((rotary, (q, cos, sin)), (crope, (q, cos, sin)), (rotary, (nq, ncos, nsin)), (cneox, (nq, ncos, nsin))):
    torch.cuda.nvtx.range_push(getattr(f, "__name__", "compiled"))
    f(*args)
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
print("profiled 4 calls: template Llama, compile Llama, template NeoX, compile NeoX")
