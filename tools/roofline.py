"""The roofline floor of a task: the least time its FLOPs and its minimal bytes allow.

FLOPs come from torch's flop counter (it knows matmuls, convolutions and attention; work
it does not know counts as zero, so such tasks are judged by their bytes). Minimal bytes
are the inputs, weights and buffers read once and the outputs written once.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from .hardware import GpuSpec
from .result import Roofline


def tensor_bytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, list | tuple):
        return sum(tensor_bytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(tensor_bytes(x) for x in obj.values())
    return 0


def count_flops(model: torch.nn.Module, inputs: list[Any]) -> tuple[float, Any]:
    """FLOPs of one forward pass, and its output. Where the counter itself fails (torch 2.11's
    formula for CUDA attention asserts on grouped key heads: Llama's attention in bf16), the
    pass runs again without it and its FLOPs count as unknown (zero); an error of the
    model's own comes from that second pass."""
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            out = model(*inputs)
    except Exception:  # noqa: BLE001 - the counter's or the model's: the plain pass tells
        with torch.no_grad():
            return 0.0, model(*inputs)
    return float(counter.get_total_flops()), out


def roofline(model: torch.nn.Module, inputs: list[Any], gpu: GpuSpec | None, precision: str) -> Roofline:
    flops, out = count_flops(model, inputs)
    state = list(model.parameters()) + list(model.buffers())
    min_bytes = float(tensor_bytes(inputs) + tensor_bytes(state) + tensor_bytes(out))
    peak_tflops = gpu.peak_tflops(precision, tensor_core_work=flops > 0) if gpu else None
    peak_gbps = gpu.peak_gbps if gpu else None
    compute_ms = flops / (peak_tflops * 1e12) * 1e3 if peak_tflops else None
    memory_ms = min_bytes / (peak_gbps * 1e9) * 1e3 if peak_gbps else None
    known = [t for t in (compute_ms, memory_ms) if t is not None]
    floor_ms = max(known) if known else None
    bound = "compute" if (compute_ms or 0.0) > (memory_ms or 0.0) else "memory"
    return Roofline(
        flops=flops,
        min_bytes=min_bytes,
        floor_ms=floor_ms,
        bound=bound,
        gpu=gpu.canonical if gpu else None,
        peak_tflops=peak_tflops,
        peak_gbps=peak_gbps,
    )
