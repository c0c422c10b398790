"""Detect the GPU and match it to the spec table in ``corpus/hardware/gpus.json``."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import subprocess
from importlib import resources
from typing import Any

import torch


@dataclasses.dataclass(frozen=True)
class GpuSpec:
    """A GPU as detected (name, SMs, L2, shared memory) and, when known, its datasheet peaks."""

    name: str  # as the driver reports it
    canonical: str | None  # key in gpus.json, e.g. "H100-SXM"; None when not in the table
    sms: int
    l2_bytes: int
    smem_per_block_bytes: int
    compute_capability: str
    memory_bytes: int
    peak_gbps: float | None
    tflops: dict[str, float]
    features: tuple[str, ...] = ()

    @property
    def arch(self) -> str:
        return "sm_" + self.compute_capability.replace(".", "")

    def peak_tflops(self, precision: str, tensor_core_work: bool) -> float | None:
        """The peak rate for work in ``precision``: tensor cores when the work is matrix work and
        the precision class lets it use them (tf32, bf16, fp16), CUDA cores otherwise."""
        if tensor_core_work and precision in ("tf32", "bf16", "fp16"):
            return self.tflops.get(f"{precision}_tc")
        return self.tflops.get("fp32" if precision in ("fp32", "tf32") else precision) or self.tflops.get(
            "fp32"
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@functools.cache
def spec_table() -> dict[str, dict[str, Any]]:
    text = resources.files("kforge.corpus").joinpath("hardware/gpus.json").read_text()
    table: dict[str, dict[str, Any]] = json.loads(text)["gpus"]
    return table


def match_spec(device_name: str) -> str | None:
    """The canonical key for a driver-reported name; the most specific pattern wins."""
    best: tuple[int, str] | None = None
    for key, spec in spec_table().items():
        for pattern in spec["match"]:
            if pattern.lower() in device_name.lower() and (best is None or len(pattern) > best[0]):
                best = (len(pattern), key)
    return best[1] if best else None


def spec_for(canonical: str) -> GpuSpec:
    """The datasheet spec of a GPU by canonical name, for planning on a machine without it."""
    spec = spec_table()[canonical]
    return GpuSpec(
        name=spec["vendor_name"],
        canonical=canonical,
        sms=spec["sms"],
        l2_bytes=int(spec["l2_mb"] * 2**20),
        smem_per_block_bytes=spec["smem_per_block_kb"] * 1024,
        compute_capability=spec["compute_capability"],
        memory_bytes=int(spec["memory_gb"] * 1e9),
        peak_gbps=spec["memory_bandwidth_gbps"],
        tflops=dict(spec["tflops"]),
        features=tuple(spec["features"]),
    )


def detect_gpu(index: int = 0) -> GpuSpec | None:
    """The visible GPU ``index`` with its spec, or None when there is no CUDA GPU."""
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(index)
    canonical = match_spec(props.name)
    table = spec_table().get(canonical, {}) if canonical else {}
    return GpuSpec(
        name=props.name,
        canonical=canonical,
        sms=props.multi_processor_count,
        l2_bytes=int(getattr(props, "L2_cache_size", 0)),
        smem_per_block_bytes=int(getattr(props, "shared_memory_per_block_optin", 0)),
        compute_capability=f"{props.major}.{props.minor}",
        memory_bytes=int(props.total_memory),
        peak_gbps=table.get("memory_bandwidth_gbps"),
        tflops=dict(table.get("tflops", {})),
        features=tuple(table.get("features", ())),
    )


@functools.cache
def cuda_arch_list() -> str | None:
    """Compute capability for extension builds, without creating a CUDA context here."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout.split()
    except (subprocess.SubprocessError, OSError):
        return None
    return out[0] if out else None
