"""Precision-lowering strategies, offered only when the user allows that precision class:
TF32 tensor-core matmuls and convolutions (tf32), bf16 weights and activations with outputs cast
back (bf16). Never under fp32."""

from __future__ import annotations

from ..features import TaskFeatures
from .source import Spec

PRELUDE = '''
def _kforge_to_bf16(module):
    """Parameters and buffers to bf16, once (after the weights are loaded)."""
    if not module.__dict__.get("_kforge_bf16_done"):
        module.to(torch.bfloat16)
        module.__dict__["_kforge_bf16_done"] = True


def _kforge_cast(out, dtype):
    """Floating tensors to ``dtype`` (inputs to bf16, outputs back to the input dtype)."""
    if isinstance(out, torch.Tensor):
        return out.to(dtype) if out.is_floating_point() else out
    if isinstance(out, (list, tuple)):
        return type(out)(_kforge_cast(o, dtype) for o in out)
    return out
'''

TF32 = Spec(
    family="tf32",
    runner="compile",
    mode="max-autotune-no-cudagraphs",
    flags=("tf32",),
    note="TF32 tensor cores for the matmuls and convolutions, autotuned templates",
)
BF16 = Spec(
    family="bf16",
    runner="compile",
    flags=("bf16",),
    note="bf16 weights and activations: tensor-core matmuls at half the bytes",
)


def specs(features: TaskFeatures, precision: str, device: str) -> list[Spec]:
    if device != "cuda" or not (features.has_matmul or features.has_conv):
        return []
    if precision == "tf32":
        return [TF32]
    if precision == "bf16":
        return [BF16]
    return []
