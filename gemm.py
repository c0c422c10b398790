"""``kforge.gemm.matmul(a, b)``: the per-shape tuned fp16 GEMM where this GPU's dispatch
table has the shape, torch.matmul otherwise (see ``kforge gemm``)."""

from .tools.gemm.dispatch import matmul

__all__ = ["matmul"]
