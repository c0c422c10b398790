"""Half-precision GEMM, C = A @ B with fp16 A, B and C and an fp32 accumulator: one Triton
kernel with per-shape tile configs, its compiled per-shape launch, and the check that tells
fp32 from fp16 accumulation (the dispatch table and ``matmul`` are in ``tools/gemm/dispatch.py``).

On Hopper, Triton lowers ``tl.dot`` of fp16 tiles with 4+ warps and a 64-row block to wgmma
and pipelines the loads over ``num_stages`` buffers. SPLIT_K > 1 splits the K loop over a
second grid axis for shapes with too few output tiles to fill the SMs: each slice writes an
fp32 partial and the last slice to finish a tile sums them and rounds to fp16 once, in the
same launch. Configs of kind ``tma`` run the persistent TMA kernel of ``tools/gemm/tma.py``
instead (``tma_ws``: with Triton's warp specialisation), or with ``split_k`` > 1 its split-K
kernel on TMA loads; kind ``stream_k`` runs its stream-K kernel, and kind ``cuda`` the
hand-written CUDA C++ kernel of ``tools/gemm/cuda.py`` (the config is ``tools/gemm/config.py``'s).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from . import cuda
from .config import HgemmConfig
from .tma import (
    TMA_KERNEL,
    TMA_SPLIT_KERNEL,
    TMA_STREAMK_KERNEL,
    ensure_allocator,
    streamk_split,
    subtile,
    tma_aligned,
    tma_grid,
)

# ||C - C64|| / ||C64|| on random normal inputs. fp32 accumulation with an fp16 output lands
# near 2.1e-4 at every K (the output rounding dominates); an fp16 accumulator grows with the
# number of K blocks and is over this line from K of about 768 on (tests/test_hgemm.py).
TOLERANCE = 5e-4


@triton.jit
def _hgemm_kernel(
    a_ptr, b_ptr, c_ptr, ws_ptr, lock_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr, ACC_FP16: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(axis=0)
    slice_id = tl.program_id(axis=1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # Grouped order: GROUP_M row tiles share the same B column tiles while they sit in L2.
    group_size = GROUP_M * num_pid_n
    first_m = (pid // group_size) * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % rows
    pid_n = (pid % group_size) // rows
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = slice_id * BLOCK_K + tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_m[:, None] % M) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + (offs_n[None, :] % N) * stride_bn
    acc_dtype = tl.float16 if ACC_FP16 else tl.float32
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=acc_dtype)
    for k in range(slice_id * BLOCK_K, K, BLOCK_K * SPLIT_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            in_k = k + tl.arange(0, BLOCK_K) < K
            a = tl.load(a_ptrs, mask=in_k[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=in_k[:, None], other=0.0)
        acc = tl.dot(a, b, acc, out_dtype=acc_dtype)
        a_ptrs += BLOCK_K * SPLIT_K * stride_ak
        b_ptrs += BLOCK_K * SPLIT_K * stride_bk
    tile = offs_m[:, None] * N + offs_n[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if SPLIT_K == 1:
        tl.store(c_ptr + tile, acc.to(tl.float16), mask=mask)
    else:
        # Split-K in one launch: each slice leaves its fp32 partial in the workspace; the
        # slice that arrives last at this tile's counter sums them, writes C once and
        # resets the counter for the next call.
        tl.store(ws_ptr + slice_id * M * N + tile, acc.to(tl.float32), mask=mask)
        tl.debug_barrier()
        arrived = tl.atomic_add(lock_ptr + pid, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = acc.to(tl.float32)
            for s in range(SPLIT_K):
                if s != slice_id:
                    total += tl.load(ws_ptr + s * M * N + tile, mask=mask, other=0.0, cache_modifier=".cg")
            tl.store(c_ptr + tile, total.to(tl.float16), mask=mask)
            tl.atomic_xchg(lock_ptr + pid, 0)


@dataclasses.dataclass
class _Plan:
    """One shape's launch, compiled: grid, scalar arguments, split-K counters and workspace,
    the kernel, and (on a GPU) the launch itself."""

    grid: tuple[int, int]
    scalars: tuple[Any, ...]
    locks: torch.Tensor
    device_index: int
    ws: torch.Tensor | None = None  # split-K's fp32 partials, kept between calls
    persistent: bool = False  # the persistent TMA kernel: no workspace or counters
    cuda_tile: int | None = None  # the CUDA C++ kernel: its entry in cuda.CUDA_TILES
    kernel: Any = None
    launch: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None

    @property
    def on_gpu(self) -> bool:
        return self.locks.is_cuda

    @property
    def extra(self) -> tuple[torch.Tensor, ...]:
        """The kernel's tensor arguments after A, B and C: the split-K workspace (the
        counters stand in for it, unused, without split-K) and the counters."""
        return () if self.persistent else (self.locks if self.ws is None else self.ws, self.locks)


_PLANS: dict[tuple[Any, ...], _Plan] = {}
# The compiled launches of 16-byte aligned fp16 operands, by config, shapes and strides: the
# per-call path of a known shape (tuned small GEMMs are host-bound: the whole call is a few
# microseconds of Python beside the launch, as cheap as torch.matmul's C++ path).
_LAUNCHES: dict[tuple[Any, ...], _Plan] = {}


def _plan(a: torch.Tensor, b: torch.Tensor, cfg: HgemmConfig) -> _Plan:
    (m, k), n, split = a.shape, b.shape[1], cfg.split_k
    if cfg.uses_tma and (cfg.acc_fp16 or (split > 1 and cfg.kind == "tma_ws")):
        raise ValueError(
            f"{cfg.name}: the TMA kernels have no fp16 accumulator, and no warp specialisation with split-K"
        )
    if cfg.kind == "stream_k" and split > 1:
        raise ValueError(f"{cfg.name}: stream-K runs on TMA loads, without split-K or warp specialisation")
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
    if cfg.kind == "cuda":
        if cfg.acc_fp16 or not a.is_cuda:
            raise ValueError(
                f"{cfg.name}: the CUDA C++ kernel runs on a CUDA GPU, without TMA or fp16 accumulation"
            )
        tile = cuda.tile_index(cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_warps, cfg.num_stages)
        partials = torch.empty((split, m, n), device=a.device, dtype=torch.float32) if split > 1 else None
        counters = torch.zeros(tiles, dtype=torch.int32, device=a.device)
        return _Plan((tiles, split), (m, n, k), counters, a.get_device(), partials, cuda_tile=tile)
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count if a.is_cuda else 4
    if cfg.kind == "stream_k":
        sk_tiles, iters = streamk_split(tiles, triton.cdiv(k, cfg.block_k), sms)
        slots = torch.empty((2 * sms, cfg.block_m, cfg.block_n), device=a.device, dtype=torch.float32)
        counters = torch.zeros(tiles, dtype=torch.int32, device=a.device)
        sk_consts = (cfg.block_m, cfg.block_n, cfg.block_k, cfg.group_m, sms)
        sk_scalars = (m, n, k, a.stride(0), b.stride(0), sk_tiles, iters, *sk_consts)
        return _Plan((sms, 1), sk_scalars, counters, a.get_device(), slots)
    ws = torch.empty((split, m, n), device=a.device, dtype=torch.float32) if split > 1 else None
    locks = torch.zeros(tiles, dtype=torch.int32, device=a.device)  # split-K's counters
    if cfg.uses_tma and split > 1:
        split_consts = (cfg.block_m, cfg.block_n, cfg.block_k, cfg.group_m, split)
        scalars_tma_split = (m, n, k, a.stride(0), b.stride(0), *split_consts)
        return _Plan((tiles, split), scalars_tma_split, locks, a.get_device(), ws)
    if cfg.uses_tma:
        half = subtile(cfg.block_m, cfg.block_n, cfg.num_stages)
        tma_consts = (cfg.block_m, cfg.block_n, cfg.block_k, cfg.group_m, sms, cfg.kind == "tma_ws", half)
        grid = (tma_grid(m, n, cfg.block_m, cfg.block_n, sms), 1)
        tma_scalars = (m, n, k, a.stride(0), b.stride(0), *tma_consts)
        return _Plan(grid, tma_scalars, a.new_empty(0, dtype=torch.int32), a.get_device(), persistent=True)
    even_k = k % (cfg.block_k * split) == 0
    consts = (cfg.block_m, cfg.block_n, cfg.block_k, cfg.group_m, split, even_k, cfg.acc_fp16)
    scalars = (m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), *consts)
    return _Plan((tiles, split), scalars, locks, a.get_device(), ws)


def _launcher(plan: _Plan) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The compiled kernel's launch for one shape, with everything but A, B and the new C
    bound: Triton's launcher straight, not the JIT's per-call dispatch (argument
    specialisation, cache lookup), which costs tens of microseconds of host time. Where the
    launcher is Triton 3.6's (``_bare_launch``), its C entry point is called directly with a
    scratch buffer kept in the closure. C comes from ``empty_like`` of a broadcast 1x1 tensor:
    a contiguous (M, N) tensor for less host time than ``torch.empty`` with its arguments."""
    if plan.cuda_tile is not None:
        return _cuda_launcher(plan)
    kernel, (gx, gy), index = plan.kernel, plan.grid, plan.device_index
    run, function, metadata = kernel.run, kernel.function, kernel.packed_metadata
    like, empty_like = _c_like(plan), torch.empty_like
    stream = torch._C._cuda_getCurrentRawStream
    tail = (*plan.extra, *plan.scalars)
    call, head = _bare_launch(run, gx * gy, metadata) or (run, (metadata, None, None, None))

    def launch(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        c = empty_like(like)
        call(gx, gy, 1, stream(index), function, *head, a, b, c, *tail)
        return c

    return launch


def _c_like(plan: _Plan) -> torch.Tensor:
    """A broadcast 1x1 fp16 tensor of C's shape: ``empty_like`` of it is a contiguous C."""
    m, n = plan.scalars[0], plan.scalars[1]
    return torch.empty((1, 1), device=plan.locks.device, dtype=torch.float16).expand(m, n)


def _cuda_launcher(plan: _Plan) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The CUDA C++ kernel's call: C allocated as the Triton launch does, one C++ function."""
    op, tile, split, locks = plan.kernel, plan.cuda_tile, plan.grid[1], plan.locks
    partials = plan.ws if plan.ws is not None else locks
    like, empty_like = _c_like(plan), torch.empty_like

    def launch(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        c = empty_like(like)
        op(a, b, c, partials, locks, tile, split)
        return c

    return launch


# Triton 3.6's CudaLauncher.__call__ arguments. It allocates the kernel's global scratch
# (the TMA kernels' device-built descriptors) through the allocator on every call, a few
# microseconds of torch.empty; then it calls its C launcher.
_BARE_CALL = ("self", "gridX", "gridY", "gridZ", "stream", "function")


def _bare_launch(run: Any, programs: int, metadata: Any) -> tuple[Any, tuple[Any, ...]] | None:
    """For a Triton 3.6 launcher, its C entry point and the arguments it takes between the
    kernel's function and the kernel's own arguments: cooperative-grid and PDL flags, a global
    scratch allocated once for ``programs`` programs (reused by every call of the plan, like
    split-K's workspace), no profile scratch, the metadata and no launch hooks. None for any
    other launcher (called as it is)."""
    code = getattr(vars(type(run)).get("__call__"), "__code__", None)
    if code is None or code.co_varnames[: code.co_argcount] != _BARE_CALL:
        return None
    needed = ("launch", "global_scratch_size", "profile_scratch_size", "num_ctas")
    if not all(hasattr(run, a) for a in needed) or run.profile_scratch_size > 0:
        return None
    scratch = None
    if run.global_scratch_size > 0:
        from triton.runtime import _allocation

        size = programs * run.num_ctas * run.global_scratch_size
        scratch = _allocation._allocator.get()(size, run.global_scratch_align, None)
    flags = (run.launch_cooperative_grid, run.launch_pdl)
    return run.launch, (*flags, scratch, None, metadata, None, None, None)


def _compile(plan: _Plan, cfg: HgemmConfig, tensors: tuple[torch.Tensor, ...]) -> None:
    """Compile the plan's kernel without running it; under the interpreter, run it instead."""
    if cfg.kind == "cuda":
        plan.kernel = cuda.extension().hgemm
        return
    opts = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    jit = _hgemm_kernel
    if cfg.uses_tma:
        jit = (
            TMA_STREAMK_KERNEL
            if cfg.kind == "stream_k"
            else TMA_SPLIT_KERNEL
            if cfg.split_k > 1
            else TMA_KERNEL
        )
        ensure_allocator()
    if not plan.on_gpu:  # the interpreter (TRITON_INTERPRET=1) has no compiled kernel
        jit[plan.grid](*tensors, *plan.scalars, **opts)
        return
    plan.kernel = jit.warmup(*tensors, *plan.scalars, grid=plan.grid, **opts)
    plan.kernel._init_handles()


def hgemm(a: torch.Tensor, b: torch.Tensor, cfg: HgemmConfig) -> torch.Tensor:
    """A @ B for fp16 2-D ``a`` (M, K) and ``b`` (K, N) with one config.

    After the first call of a shape the kernel runs through its compiled launch (``_launcher``).
    The plan is cached per dtype, shape, strides, device and pointer alignment (what the JIT
    specialises on); its split-K counters and workspace make concurrent calls of one shape on
    two streams unsafe."""
    plan = _LAUNCHES.get((cfg, a.shape, b.shape, a.stride(), b.stride()))
    if (
        plan is not None
        and a.dtype is torch.float16
        and b.dtype is torch.float16
        and a.get_device() == plan.device_index
        and b.get_device() == plan.device_index
        and (a.data_ptr() | b.data_ptr()) % 16 == 0
    ):
        return plan.launch(a, b)  # type: ignore[misc]
    return _first_or_odd_call(a, b, cfg)


def _first_or_odd_call(a: torch.Tensor, b: torch.Tensor, cfg: HgemmConfig) -> torch.Tensor:
    """A shape's first call (plan and compile), and any call the fast path does not take
    (unaligned operands, the interpreter, a second device)."""
    aligned = a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0
    key = (cfg, a.dtype, b.dtype, a.shape, b.shape, a.stride(), b.stride(), a.device, aligned)
    plan = _PLANS.get(key)
    if plan is None:
        if a.dtype != torch.float16 or b.dtype != torch.float16 or a.dim() != 2 or b.dim() != 2:
            raise ValueError("hgemm takes 2-D float16 tensors; use torch.matmul for anything else")
        if b.shape[0] != a.shape[1]:
            raise ValueError(f"hgemm: inner dimensions differ ({a.shape} @ {b.shape})")
        if a.device != b.device:
            raise ValueError(f"hgemm: operands on two devices ({a.device}, {b.device})")
        plan = _PLANS[key] = _plan(a, b, cfg)
    if cfg.kind != "triton" and not tma_aligned(a, b):
        raise ValueError(
            f"{cfg.name}: TMA and the CUDA C++ kernel need 16-byte aligned rows, unit column stride"
        )
    m, n = plan.scalars[0], plan.scalars[1]
    c = torch.empty((m, n), device=a.device, dtype=torch.float16)
    if plan.kernel is None:
        _compile(plan, cfg, (a, b, c, *plan.extra))
        if plan.kernel is None:  # the interpreter ran it
            return c
    if plan.launch is None:
        plan.launch = _launcher(plan)
        if aligned:
            _LAUNCHES.setdefault((cfg, a.shape, b.shape, a.stride(), b.stride()), plan)
    return plan.launch(a, b)


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A @ B in float64, on the operands' device."""
    return a.double() @ b.double()


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref||, with ``ref`` from :func:`reference`; inf for NaN or inf."""
    diff = out.double() - ref
    if not torch.isfinite(diff).all():
        return float("inf")
    return float(diff.norm() / ref.norm())
