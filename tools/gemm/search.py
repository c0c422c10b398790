"""Per-shape search and measurement for the fp16 GEMM of ``tools/gemm/kernels.py``.

``search_shape`` compiles, verifies and quickly times every candidate config for one
(M, N, K) and keeps the fastest correct one. ``measure_shape`` then times that kernel
against torch.matmul (as users call it), torch's cuBLASLt path (heuristic algorithm) and
cuBLASLt's best algorithm (every one its heuristic offers with a 32 MiB workspace, verified
and timed; ``tools/gemm/cublaslt.py``) on fresh inputs, every output verified, in a per-shape
random order, two ways:

* offline: ``reps`` calls back to back between two CUDA events after an L2 flush, the
  median over rounds of the per-call time;
* server: one call at a time after an idle gap and an L2 flush (``Timer``: CUDA events,
  device-wide sync), the median over trials.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import statistics
import time
from collections.abc import Callable

import torch
import triton
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources

from ..timing import LocalSlot, Timer
from . import cuda
from .config import HgemmConfig
from .cublaslt import LtGemm
from .cuda import CUDA_TILES
from .kernels import TOLERANCE, hgemm, reference, relative_error
from .tma import streamk_split

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): wgmma tiles (64-row multiples).
TILES = [
    (128, 256, 64, 8, 3),
    (128, 256, 64, 8, 4),
    (256, 128, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (64, 64, 64, 4, 5),
    (64, 64, 128, 4, 3),
    (64, 32, 128, 4, 4),
    (128, 128, 128, 8, 3),
]
# mma.sync tiles of 16 or 32 rows for skinny M (Triton's wgmma path needs 64-row blocks): an M
# of 512 gives 16 to 32 row tiles instead of 8, so split-K needs to carry less of the parallelism.
SMALL_M_TILES = [
    (16, 64, 128, 4, 4),
    (32, 64, 128, 4, 4),
    (32, 128, 64, 4, 4),
    (16, 128, 128, 4, 3),
]
# The persistent TMA schedule (tools/gemm/tma.py), for shapes with half a wave of output tiles
# or more (below a wave, one tile a program); True = with warp specialisation.
TMA_TILES = [
    (128, 256, 64, 8, 3, False),
    (128, 256, 64, 8, 4, False),  # C stored in halves (tma.subtile) to fit 4 stages
    (256, 128, 64, 8, 3, False),
    (128, 128, 64, 8, 4, False),
    (128, 128, 64, 4, 4, False),
    (128, 128, 128, 8, 3, False),
    (128, 256, 64, 8, 3, True),
    (128, 128, 64, 8, 4, True),
]
# Split-K on TMA loads (tools/gemm/tma.py), for shapes below half a wave of output tiles.
TMA_SPLIT_TILES = [
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (64, 64, 128, 4, 3),
]
# Stream-K on TMA loads (tools/gemm/tma.py), for shapes whose last wave of tiles is part-empty.
STREAMK_TILES = [
    (128, 256, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
]
STREAMK_BELOW = 0.9  # ... wave efficiency (tiles over the SM slots of the waves they take) below this
# ... and 8+ K blocks a program: below that the parts' fixup costs more than the idle SMs (on the
# first H100 run stream-K was picked only for small host-bound shapes, where candidates differ by the
# host's noise, and lost there in the measurement)
STREAMK_MIN_RUN = 8
SPLITS = (2, 3, 4, 6, 8, 12, 16)
CUDA_SPLITS = (
    2,
    4,
    8,
)  # the CUDA C++ kernel's split-K variants (fewer than Triton's: a minute's build is shared)
FAMILIES = ("tile", "small-m", "tma", "cuda")
SERVER_IDLE_S = 1e-3
GemmFn = Callable[[], torch.Tensor]


@dataclasses.dataclass
class ShapeResult:
    M: int
    N: int
    K: int
    config: str
    kforge_ms: float
    torch_ms: float
    cublaslt_ms: float
    kforge_server_ms: float
    torch_server_ms: float
    cublaslt_server_ms: float
    kforge_err: float
    torch_err: float
    cublaslt_err: float
    candidates: int
    order: str
    lt_best_ms: float = math.nan  # cuBLASLt's fastest verified heuristic algorithm
    lt_best_server_ms: float = math.nan
    lt_best_err: float = math.nan
    lt_algos: int = 0  # algorithms its heuristic offered (up to 32)
    lt_rejected: int = 0  # ... of which failed the check (left out of the best)

    @property
    def speedup(self) -> float:
        return self.torch_ms / self.kforge_ms

    @property
    def server_speedup(self) -> float:
        return self.torch_server_ms / self.kforge_server_ms


def family(cfg: HgemmConfig) -> str:
    return (
        "cuda" if cfg.kind == "cuda" else "tma" if cfg.uses_tma else "small-m" if cfg.block_m < 64 else "tile"
    )


def _with_splits(m: int, n: int, k: int, sms: int, cfg: HgemmConfig) -> list[HgemmConfig]:
    """The config and, for shapes with fewer output tiles than SMs, its split-K variants
    that keep 2+ K steps a slice."""
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
    splits = [s for s in SPLITS if tiles < sms and tiles * s <= 4 * sms and k >= 2 * cfg.block_k * s]
    return [cfg] + [dataclasses.replace(cfg, split_k=s) for s in splits]


def candidates(m: int, n: int, k: int, sms: int, families: tuple[str, ...] = FAMILIES) -> list[HgemmConfig]:
    """Configs worth trying for one shape: tiles no larger than the matrix needs with their
    split-K variants; 16/32-row tiles where 64-row ones leave SMs idle; where rows are 16-byte
    aligned, the persistent TMA schedule if the output tiles fill half the SMs or more,
    split-K on TMA loads if they do not, and stream-K where the last wave is part-empty; where
    rows are 16-byte aligned, the CUDA C++ kernel's tiles that fit, with split-K below a wave."""
    fits = [
        t
        for t in TILES
        if t[0] <= max(64, triton.next_power_of_2(m)) and t[1] <= max(32, triton.next_power_of_2(n))
    ]
    out = []
    if "tile" in families:
        for bm, bn, bk, warps, stages in fits:
            out += _with_splits(m, n, k, sms, HgemmConfig(bm, bn, bk, 8, 1, warps, stages))
    if "small-m" in families and triton.cdiv(m, 64) * triton.cdiv(n, 64) < sms:
        for bm, bn, bk, warps, stages in SMALL_M_TILES:
            if bn <= max(64, triton.next_power_of_2(n)):
                out += _with_splits(m, n, k, sms, HgemmConfig(bm, bn, bk, 8, 1, warps, stages))

    def tma_fits(bm: int, bn: int) -> bool:  # TMA boxes no larger than the matrix needs
        return bm <= max(64, triton.next_power_of_2(m)) and bn <= triton.next_power_of_2(n)

    if "tma" in families and k % 8 == 0 and n % 8 == 0:
        for bm, bn, bk, warps, stages, ws in TMA_TILES:
            if triton.cdiv(m, bm) * triton.cdiv(n, bn) >= sms // 2 and bn <= triton.next_power_of_2(n):
                out.append(HgemmConfig(bm, bn, bk, 8, 1, warps, stages, kind="tma_ws" if ws else "tma"))
        for bm, bn, bk, warps, stages in TMA_SPLIT_TILES:
            if triton.cdiv(m, bm) * triton.cdiv(n, bn) < sms // 2 and tma_fits(bm, bn):
                splits = _with_splits(m, n, k, sms, HgemmConfig(bm, bn, bk, 8, 1, warps, stages, kind="tma"))
                out += splits[1:]  # split-K only: one slice is the persistent kernel
        for bm, bn, bk, warps, stages in STREAMK_TILES:
            tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
            part_empty = tiles / (triton.cdiv(tiles, sms) * sms) < STREAMK_BELOW
            run = streamk_split(tiles, triton.cdiv(k, bk), sms)[1]  # K blocks a program
            if part_empty and run >= STREAMK_MIN_RUN and tma_fits(bm, bn):
                out.append(HgemmConfig(bm, bn, bk, 8, 1, warps, stages, kind="stream_k"))
    if "cuda" in families and k % 8 == 0 and n % 8 == 0:
        for bm, bn, bk, warps_m, warps_n, stages in CUDA_TILES:
            fits = bm <= max(16, triton.next_power_of_2(m)) and bn <= max(64, triton.next_power_of_2(n))
            if fits and (bm >= 64 or triton.cdiv(m, 64) * triton.cdiv(n, 64) < sms):  # small-M tiles as above
                cfg = HgemmConfig(bm, bn, bk, 8, 1, warps_m * warps_n, stages, kind="cuda")
                out += [c for c in _with_splits(m, n, k, sms, cfg) if c.split_k in (1, *CUDA_SPLITS)]
    return out


def random_operands(m: int, n: int, k: int, device: torch.device, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn((m, k), device=device, dtype=torch.float16, generator=gen)
    b = torch.randn((k, n), device=device, dtype=torch.float16, generator=gen)
    return a, b


def time_offline(fn: GemmFn, flush: torch.Tensor, reps: int, rounds: int = 7) -> float:
    """Median over rounds of the mean per-call time of ``reps`` back-to-back calls (ms)."""
    samples = []
    for _ in range(rounds):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) / reps)
    return statistics.median(samples)


def _reps_for(fn: GemmFn, flush: torch.Tensor) -> int:
    """Back-to-back calls that take about 2 ms, from three timed calls (5 to 200)."""
    one = time_offline(fn, flush, reps=1, rounds=3)
    return max(5, min(200, int(2.0 / max(one, 1e-3))))


def search_shape(
    m: int, n: int, k: int, device: torch.device, log: list[str], prior: HgemmConfig | None = None
) -> tuple[HgemmConfig, int]:
    """The fastest verified config for one shape and how many candidates were tried. With
    ``prior`` (an earlier run's winner, searched over the whole tile family then), the tile
    family is that config alone and the other families are searched in full."""
    a, b = random_operands(m, n, k, device, seed=m * 31 + n * 17 + k)
    ref = reference(a, b)
    flush = Timer(device, trials=1)._flush
    assert flush is not None
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    best: tuple[float, HgemmConfig] | None = None
    configs = candidates(m, n, k, sms) if prior is None else [prior, *candidates(m, n, k, sms, FAMILIES[1:])]
    configs = list(dict.fromkeys(configs))  # a prior from the TMA or small-M family is tried once
    why = cuda.unavailable() if any(c.kind == "cuda" for c in configs) else None
    if why is not None:
        log.append(f"{m}x{n}x{k}: CUDA C++ candidates left out: {why}")
        configs = [c for c in configs if c.kind != "cuda"]
    for cfg in configs:
        try:
            err = relative_error(hgemm(a, b, cfg), ref)
        except (
            OutOfResources,
            CompilationError,
            RuntimeError,
        ) as exc:  # RuntimeError: a failed compiler pass
            log.append(f"{m}x{n}x{k} {cfg.name}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            continue
        if err > TOLERANCE:
            log.append(f"{m}x{n}x{k} {cfg.name}: incorrect, relative error {err:.2e}")
            continue
        fn = functools.partial(hgemm, a, b, cfg)
        ms = time_offline(fn, flush, _reps_for(fn, flush), rounds=3)
        log.append(f"{m}x{n}x{k} {cfg.name}: {ms * 1e3:.1f} us")
        if best is None or ms < best[0]:
            best = (ms, cfg)
    if best is None:
        raise RuntimeError(f"no config compiled and verified for {m}x{n}x{k}; see the log")
    return best[1], len(configs)


def best_cublaslt(
    a: torch.Tensor, b: torch.Tensor, ref: torch.Tensor, flush: torch.Tensor
) -> tuple[GemmFn, LtGemm, int]:
    """cuBLASLt's fastest algorithm for this shape among those its heuristic offers that pass
    the check (each timed like a search candidate), as a call that allocates C like
    torch.matmul does; the problem's cuBLASLt objects (``close()`` them after the last call),
    and how many algorithms failed the check."""
    (m, k), n = a.shape, b.shape[1]
    lt = LtGemm(m, n, k, a.device)
    best: tuple[float, GemmFn] | None = None
    rejected = 0
    for index in range(len(lt.algos)):

        def call(index: int = index) -> torch.Tensor:
            return lt.run(index, a, b, torch.empty((m, n), device=a.device, dtype=torch.float16))

        if relative_error(call(), ref) > TOLERANCE:
            rejected += 1
            continue
        ms = time_offline(call, flush, _reps_for(call, flush), rounds=3)
        if best is None or ms < best[0]:
            best = (ms, call)
    if best is None:
        raise RuntimeError(
            f"cuBLASLt: none of {len(lt.algos)} heuristic algorithms passed the check at {m}x{n}x{k}"
        )
    return best[1], lt, rejected


def _blas(library: str) -> Callable[[], None]:
    def select() -> None:
        torch.backends.cuda.preferred_blas_library(library)  # type: ignore[arg-type]

    return select


def measure_shape(
    m: int, n: int, k: int, cfg: HgemmConfig, device: torch.device, trials: int, seed: int
) -> ShapeResult:
    """Tuned kernel vs torch.matmul vs cuBLASLt (heuristic, and its best algorithm) on fresh
    inputs, in random order."""
    a, b = random_operands(m, n, k, device, seed=seed)
    ref = reference(a, b)
    default_blas = str(torch.backends.cuda.preferred_blas_library()).split(".")[-1].lower()
    timer = Timer(device, trials=trials, max_seconds=1.0)
    flush = timer._flush
    assert flush is not None
    lt_best, lt, lt_rejected = best_cublaslt(a, b, ref, flush)
    fns: dict[str, GemmFn] = {
        "kforge": functools.partial(hgemm, a, b, cfg),
        "torch": functools.partial(torch.matmul, a, b),
        "cublaslt": functools.partial(torch.matmul, a, b),
        "lt_best": lt_best,
    }
    setups: dict[str, Callable[[], None]] = {
        "kforge": _blas(default_blas),
        "torch": _blas(default_blas),
        "cublaslt": _blas("cublaslt"),
        "lt_best": _blas(default_blas),
    }
    order = list(fns)
    random.Random(seed).shuffle(order)
    errs = {}
    for name in order:
        setups[name]()
        errs[name] = relative_error(fns[name](), ref)
    offline = {}
    for name in order:
        setups[name]()
        offline[name] = time_offline(fns[name], flush, _reps_for(fns[name], flush))

    def idle_then(name: str) -> Callable[[], None]:
        def before() -> None:
            setups[name]()
            time.sleep(SERVER_IDLE_S)

        return before

    server = timer.time_many({n_: LocalSlot(timer, fns[n_], idle_then(n_)) for n_ in order})
    setups["kforge"]()
    errs["kforge"] = max(errs["kforge"], relative_error(fns["kforge"](), ref))  # after reuse of the counters
    lt_algos = len(lt.algos)
    lt.close()
    return ShapeResult(
        m, n, k, cfg.name,
        offline["kforge"], offline["torch"], offline["cublaslt"],
        server["kforge"].median_ms, server["torch"].median_ms, server["cublaslt"].median_ms,
        errs["kforge"], errs["torch"], errs["cublaslt"], 0, "/".join(order),
        offline["lt_best"], server["lt_best"].median_ms, errs["lt_best"], lt_algos, lt_rejected,
    )  # fmt: skip
