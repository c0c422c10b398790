"""Each tuned shape as a KernelBench-format task (Model = torch.matmul at that shape, fp16
inputs) and its kernel as a candidate, so ``kforge eval --precision fp16``, ``kforge batch``
and the agent loop take them like any other task."""

from __future__ import annotations

from pathlib import Path

from .config import HgemmConfig

TASK = '''"""fp16 GEMM C = A @ B at ({m}, {n}, {k}), a shape of kforge gemm's list."""

import torch
import torch.nn as nn

M, N, K = {m}, {n}, {k}


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''"""kforge gemm's tuned kernel for ({m}, {n}, {k}): {name}."""

import torch
import torch.nn as nn

from kforge.tools.gemm.kernels import HgemmConfig, hgemm

CONFIG = HgemmConfig.from_name("{name}")


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return hgemm(a, b, CONFIG)
'''


def write_tasks(configs: dict[tuple[int, int, int], HgemmConfig], folder: Path) -> list[Path]:
    """``gemm_MxNxK.py`` (the task) and ``gemm_MxNxK_kforge.py`` (the candidate) per shape."""
    folder.mkdir(parents=True, exist_ok=True)
    tasks = []
    for (m, n, k), cfg in sorted(configs.items()):
        task = folder / f"gemm_{m}x{n}x{k}.py"
        task.write_text(TASK.format(m=m, n=n, k=k))
        (folder / f"gemm_{m}x{n}x{k}_kforge.py").write_text(CANDIDATE.format(m=m, n=n, k=k, name=cfg.name))
        tasks.append(task)
    return tasks
