"""kforge's own Triton kernels compile for Hopper (sm_90) on a machine with no GPU.

The interpreter (the other CPU tests) runs a kernel's Python semantics; it never lowers it. A
kernel that the interpreter runs can still fail to compile for the GPU (a layout Triton cannot
convert, a dot shape the tensor cores lack, an op on the wrong type), which would cost a device
call to learn. Here each kernel is compiled ahead of time, with Triton's own ptxas, for an
H100, at the first and the last configuration its autotuner may pick (all of them took 68 s
on two cores; a configuration that fails alone, the autotuner skips): the compile must succeed,
and at least one must fit an SM's shared memory.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import triton
from kforge.tools import losses, norms, softmax
from kforge.tools.gemm import attention, conv, tf32x3
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

H100 = GPUTarget("cuda", 90, 32)
SMEM = 232448  # bytes of shared memory one block may use on an H100


def _ptxas() -> bool:
    import triton.backends.nvidia as nvidia

    return os.path.isfile(os.path.join(os.path.dirname(nvidia.__file__), "bin", "ptxas"))


pytestmark = pytest.mark.skipif(not _ptxas(), reason="Triton's NVIDIA backend has no ptxas here")


def compile_for_hopper(kernel: Any, types: dict[str, str], constexprs: dict[str, Any], config: Any) -> int:
    """Shared memory in bytes of ``kernel`` compiled for an H100 with ``config`` (a
    triton.Config or (warps, stages)); every argument not in ``types`` or ``constexprs`` is an
    i32."""
    if isinstance(config, tuple):
        meta, (warps, stages) = {}, config
    else:
        meta, warps, stages = config.kwargs, config.num_warps, config.num_stages
    consts = {**constexprs, **meta}
    names = kernel.arg_names
    signature = {n: "constexpr" if n in consts else types.get(n, "i32") for n in names}
    source = ASTSource(
        fn=kernel, signature=signature, constexprs={(names.index(k),): v for k, v in consts.items()}
    )
    compiled = triton.compile(source, target=H100, options={"num_warps": warps, "num_stages": stages})
    return int(compiled.metadata.shared)


def ptrs(*names: str, dtype: str = "*fp32") -> dict[str, str]:
    return dict.fromkeys(names, dtype)


# the flash kernel's operands; its map of masked cells is int8 (rh_ptr, rw_ptr: SAM's relative-position tables)
ATTENTION = ptrs("q_ptr", "k_ptr", "v_ptr", "o_ptr", "bias_ptr", "row_ptr", "knorm_ptr", "rh_ptr", "rw_ptr") | {
    "qk_scale": "fp32", "skip_ptr": "*i8"
}  # fmt: skip

CASES = [
    ("norm", norms.norm_kernel, ptrs("x_ptr", "r_ptr", "w_ptr", "b_ptr", "y_ptr", "h_ptr") | {"eps": "fp32"},
     dict(HAS_RES=True, STORE_H=True, HAS_W=True, HAS_B=True, RMS=False, BLOCK_N=1024), norms._configs()),
    ("cross-entropy", losses.cross_entropy_kernel, ptrs("x_ptr", "nll_ptr", "smooth_ptr") | {"t_ptr": "*i64"},
     {}, losses._configs()),
    ("softmax row", softmax.row_kernel, ptrs("x_ptr", "y_ptr") | {"scale": "fp32"},
     dict(LOG=True, BLOCK=softmax.ROW_MAX), [(16, 1)]),
    ("softmax chunk stats", softmax.chunk_stats_kernel, ptrs("x_ptr", "m_ptr", "s_ptr") | {"scale": "fp32"},
     dict(BLOCK=softmax.CHUNK), [(8, 1)]),
    ("softmax chunk write", softmax.chunk_write_kernel, ptrs("x_ptr", "y_ptr", "m_ptr", "s_ptr") | {"scale": "fp32"},
     dict(LOG=False, BLOCK=softmax.CHUNK, CHUNKS_P2=32), [(8, 1)]),
    ("3xTF32 split", tf32x3.split_kernel, ptrs("x_ptr", "out_ptr"), dict(BLOCK=1024), [(4, 1)]),
    ("3xTF32 GEMM", tf32x3.gemm_kernel, ptrs("a_ptr", "w_ptr", "bias_ptr", "c_ptr"), dict(HAS_BIAS=True, ACT=3),
     tf32x3._configs()),
    ("3xTF32 convolution", conv.conv_kernel, ptrs("x_ptr", "wb_ptr", "ws_ptr", "bias_ptr", "res_ptr", "y_ptr"),
     dict(KH=3, KW=3, HAS_BIAS=True, HAS_RES=True, ACT=1), conv._configs()),
    ("3xTF32 flash attention", attention.attention_kernel,
     ATTENTION,
     dict(CAUSAL=True, BIAS=0, SKIP=False, BLOCK_D=64), attention._configs()),
    ("3xTF32 flash attention, a key bias", attention.attention_kernel,
     ATTENTION,
     dict(CAUSAL=True, BIAS=1, SKIP=False, BLOCK_D=64), attention._configs()[:1]),
    ("3xTF32 flash attention, a bias per query", attention.attention_kernel,
     ATTENTION,
     dict(CAUSAL=False, BIAS=2, SKIP=False, BLOCK_D=128), attention._configs()[:1]),
    ("3xTF32 flash attention, a tile and a key row", attention.attention_kernel,
     ATTENTION,
     dict(CAUSAL=False, BIAS=3, SKIP=False, BLOCK_D=64), attention._configs()[:1]),
    ("3xTF32 flash attention, decomposed relative positions and a key row", attention.attention_kernel,
     ATTENTION,
     dict(CAUSAL=False, BIAS=5, SKIP=False, BLOCK_D=64), attention._configs()),
    ("3xTF32 flash attention, head dim 256", attention.attention_kernel,
     ATTENTION,
     dict(CAUSAL=True, BIAS=0, SKIP=False, BLOCK_D=256), attention._wide_configs()),
    ("3xTF32 flash attention, a tile's masked blocks skipped", attention.attention_kernel,
     ATTENTION,
     dict(CAUSAL=False, BIAS=2, SKIP=True, BLOCK_D=128), attention._configs()),
    ("3xTF32 flash attention, head dim 256, masked blocks skipped", attention.attention_kernel,
     ATTENTION,
     dict(CAUSAL=True, BIAS=2, SKIP=True, BLOCK_D=256), attention._wide_configs()),
]  # fmt: skip


@pytest.mark.parametrize("name,kernel,types,constexprs,configs", CASES, ids=[c[0] for c in CASES])
def test_the_kernel_compiles_for_hopper(
    name: str, kernel: Any, types: dict[str, str], constexprs: dict[str, Any], configs: list[Any]
) -> None:
    ends = configs[:1] + configs[1:][-1:]
    shared = [compile_for_hopper(kernel, types, constexprs, config) for config in ends]
    assert any(s <= SMEM for s in shared), (name, shared)  # at least one configuration can launch


def test_the_gpu_precision_fixture_compiles_for_hopper() -> None:
    """``cheats/precision_behind_tf32x3`` must reach the GPU's comparisons, not fail to compile:
    it read a plain global in its kernel, which the interpreter runs and the compiler refuses
    (its GPU test, 2026-11-26, saw a runtime_error)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent / "fixtures" / "cheats" / "precision_behind_tf32x3.py"
    spec = importlib.util.spec_from_file_location("precision_behind_tf32x3", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (
        compile_for_hopper(
            module.mm_kernel, ptrs("a_ptr", "b_ptr", "c_ptr"), {"BLOCK": 32, "BLOCK_K": 32}, (4, 2)
        )
        > 0
    )
