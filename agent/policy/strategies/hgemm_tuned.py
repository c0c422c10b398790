"""``kforge gemm``'s per-shape fp16 Triton GEMM as an embedded strategy (family
``hgemm-tuned``), so a GEMM task reaches the tuned kernel through the graph.

A task matches when its traced forward is one 2-D matmul of its two inputs and both are
fp16, as ``kforge gemm`` writes its tasks. The first candidate runs the config this GPU's
dispatch table holds for the shape (``tools/gemm/tables``), or else the search's first
candidate; a winner's variants are the next configs of the search's candidate list, two at
a time, so rounds of the loop walk the same search space ``kforge gemm`` does. On the CPU
(Triton's interpreter) the configs are small tiles: the loop can be tested, not sped up.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import torch
import torch.fx

from ....tools import fx_source
from ....tools.gemm.config import HgemmConfig
from ....tools.gemm.dispatch import load_table, table_path
from .source import Body, Spec

FAMILY = "hgemm-tuned"
CPU_CONFIGS = (
    HgemmConfig(16, 16, 32),
    HgemmConfig(16, 16, 32, split_k=2),
    HgemmConfig(32, 32, 32, num_stages=2),
)
VARIANTS_PER_WINNER = 2
MATMULS = (torch.matmul, torch.mm, operator.matmul)
PRELUDE = "from kforge.tools.gemm.kernels import HgemmConfig, hgemm as _kforge_hgemm"


def match(model: torch.nn.Module, inputs: list[Any]) -> tuple[tuple[int, int, int], list[str]] | None:
    """((M, N, K), the two input names) when the forward is ``a @ b`` of 2-D fp16 inputs."""
    gm = fx_source.trace(model, meta_inputs=inputs)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    compute = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    if len(compute) != 1 or len(placeholders) != 2 or len(inputs) != 2:
        return None
    node = compute[0]
    is_matmul = node.target in MATMULS or (node.op == "call_method" and node.target in ("matmul", "mm"))
    if not is_matmul or list(node.args) != placeholders or node.kwargs:
        return None
    a, b = inputs
    if not all(isinstance(t, torch.Tensor) and t.dim() == 2 and t.dtype == torch.float16 for t in (a, b)):
        return None
    if a.shape[1] != b.shape[0]:
        return None
    return (a.shape[0], b.shape[1], a.shape[1]), [p.name for p in placeholders]


@functools.cache
def configs(shape: tuple[int, int, int], device: str) -> tuple[HgemmConfig, ...]:
    """The configs the loop tries for one shape, in order."""
    if device != "cuda":
        return CPU_CONFIGS
    from ....tools.gemm.search import candidates

    props = torch.cuda.get_device_properties(0)
    path = table_path(props.name)
    tuned = load_table(path).get(shape) if path.exists() else None
    searched = candidates(*shape, props.multi_processor_count)
    return tuple(dict.fromkeys([tuned, *searched] if tuned is not None else searched))


def spec(cfg: HgemmConfig) -> Spec:
    return Spec(
        family=FAMILY,
        body=f"hgemm:{cfg.name}",
        tag=f"hgemm[{cfg.name}]",
        note=f"kforge gemm's fp16 GEMM (Triton or CUDA C++), fp32 accumulation, config {cfg.name}",
    )


def base(shape: tuple[int, int, int], device: str) -> Spec:
    return spec(configs(shape, device)[0])


def variants(current: Spec, shape: tuple[int, int, int], device: str) -> list[Spec]:
    """The next configs of the list after the winner's."""
    names = [c.name for c in configs(shape, device)]
    name = current.body.removeprefix("hgemm:")
    start = names.index(name) + 1 if name in names else len(names)
    return [spec(cfg) for cfg in configs(shape, device)[start : start + VARIANTS_PER_WINNER]]


def body(cfg_name: str, params: list[str]) -> Body:
    a, b = params
    prelude = f'{PRELUDE}\n\n_KFORGE_HGEMM_CONFIG = HgemmConfig.from_name("{cfg_name}")'
    method = f"def _kforge_body(self, {a}, {b}):\n    return _kforge_hgemm({a}, {b}, _KFORGE_HGEMM_CONFIG)\n"
    return Body(method=method, prelude=prelude)
