"""The per-GPU dispatch table of ``kforge gemm``'s tuned fp16 GEMMs and the dispatcher
``kforge.gemm.matmul``: the tuned kernel (``tools/gemm/kernels.py``) for a known (M, N, K), torch.matmul
otherwise."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from . import kernels
from .config import HgemmConfig
from .kernels import hgemm
from .tma import tma_aligned

TABLE_DIR = Path(__file__).resolve().parent / "tables"


def table_path(gpu_name: str, directory: Path = TABLE_DIR) -> Path:
    """The dispatch table's file for one GPU model, e.g. NVIDIA_H100_80GB_HBM3.json."""
    return directory / ("".join(c if c.isalnum() else "_" for c in gpu_name) + ".json")


def save_table(path: Path, gpu_name: str, configs: dict[tuple[int, int, int], HgemmConfig]) -> None:
    rows = [{"M": m, "N": n, "K": k, **cfg.to_json()} for (m, n, k), cfg in sorted(configs.items())]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"gpu": gpu_name, "shapes": rows}, indent=1) + "\n")


def load_table(path: Path) -> dict[tuple[int, int, int], HgemmConfig]:
    rows = json.loads(path.read_text())["shapes"]
    return {(r.pop("M"), r.pop("N"), r.pop("K")): HgemmConfig.from_json(r) for r in rows}


@functools.cache
def _table_for(device_index: int) -> dict[tuple[int, int, int], HgemmConfig]:
    path = table_path(torch.cuda.get_device_name(device_index))
    return load_table(path) if path.exists() else {}


# The dispatcher's per-call path: by operands' shapes, strides, dtypes and devices, the
# tuned kernel's compiled launch, or None for torch.matmul (a shape not in the table, or not
# a 2-D fp16 CUDA product). Bounded: cleared when it grows past _DISPATCH_MAX keys.
_DISPATCH: dict[tuple[Any, ...], Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None] = {}
_DISPATCH_MAX = 4096
_UNSEEN = object()


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b``: the tuned kernel for a 2-D fp16 CUDA shape in this GPU's table, else
    torch.matmul. A known shape's call is one dictionary lookup and an alignment check before
    the kernel's launch."""
    key = (a.shape, b.shape, a.stride(), b.stride(), a.dtype, b.dtype, a.get_device(), b.get_device())
    launch = _DISPATCH.get(key, _UNSEEN)
    if launch is None:
        return torch.matmul(a, b)
    if launch is not _UNSEEN and (a.data_ptr() | b.data_ptr()) % 16 == 0:
        return launch(a, b)  # type: ignore[operator]
    return _dispatch_first(a, b, key)


def _dispatch_first(a: torch.Tensor, b: torch.Tensor, key: tuple[Any, ...]) -> torch.Tensor:
    """A key's first call (it is remembered), and unaligned operands (they are not)."""
    cfg = None
    if a.is_cuda and a.dtype is torch.float16 and b.dtype is torch.float16 and a.dim() == b.dim() == 2:
        cfg = _table_for(a.get_device()).get((a.shape[0], b.shape[1], a.shape[1]))
    if len(_DISPATCH) >= _DISPATCH_MAX:
        _DISPATCH.clear()
    if cfg is None:
        _DISPATCH[key] = None
        return torch.matmul(a, b)
    if cfg.kind != "triton" and not tma_aligned(a, b):
        return torch.matmul(a, b)
    out = hgemm(a, b, cfg)
    plan = kernels._LAUNCHES.get((cfg, a.shape, b.shape, a.stride(), b.stride()))
    if plan is not None and plan.device_index == a.get_device() == b.get_device():
        _DISPATCH[key] = plan.launch
    return out
