"""Per-shape search and measurement for the fp16 GEMM of ``tools/hgemm.py``.

``search_shape`` compiles, verifies and quickly times every candidate config for one
(M, N, K) and keeps the fastest correct one. ``measure_shape`` then times that kernel
against torch.matmul (as users call it) and torch's cuBLASLt path (heuristic algorithm) on
fresh inputs, every output verified, in a per-shape random order, two ways:

* offline: ``reps`` calls back to back between two CUDA events after an L2 flush, the
  median over rounds of the per-call time;
* server: one call at a time after an idle gap and an L2 flush (``Timer``: CUDA events,
  device-wide sync), the median over trials.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import statistics
import time
from collections.abc import Callable

import torch
import triton
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources

from .hgemm import TOLERANCE, HgemmConfig, hgemm, reference, relative_error
from .timing import Timer

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
SPLITS = (2, 3, 4, 6, 8, 12, 16)
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

    @property
    def speedup(self) -> float:
        return self.torch_ms / self.kforge_ms

    @property
    def server_speedup(self) -> float:
        return self.torch_server_ms / self.kforge_server_ms


def candidates(m: int, n: int, k: int, sms: int) -> list[HgemmConfig]:
    """Configs worth trying for one shape: tiles no larger than the matrix needs, and for
    shapes with fewer output tiles than SMs, split-K variants that keep 2+ K steps a slice."""
    out = []
    for bm, bn, bk, warps, stages in TILES:
        if bm > max(64, triton.next_power_of_2(m)) or bn > max(32, triton.next_power_of_2(n)):
            continue
        out.append(HgemmConfig(bm, bn, bk, 8, 1, warps, stages))
        tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
        for split in SPLITS:
            if tiles < sms and tiles * split <= 4 * sms and k >= 2 * bk * split:
                out.append(HgemmConfig(bm, bn, bk, 8, split, warps, stages))
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


def search_shape(m: int, n: int, k: int, device: torch.device, log: list[str]) -> tuple[HgemmConfig, int]:
    """The fastest verified config for one shape and how many candidates were tried."""
    a, b = random_operands(m, n, k, device, seed=m * 31 + n * 17 + k)
    ref = reference(a, b)
    flush = Timer(device, trials=1)._flush
    assert flush is not None
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    best: tuple[float, HgemmConfig] | None = None
    configs = candidates(m, n, k, sms)
    for cfg in configs:
        try:
            err = relative_error(hgemm(a, b, cfg), ref)
        except (OutOfResources, CompilationError) as exc:
            log.append(f"{m}x{n}x{k} {cfg.name}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            continue
        if err > TOLERANCE:
            log.append(f"{m}x{n}x{k} {cfg.name}: incorrect, relative error {err:.2e}")
            continue
        fn = functools.partial(hgemm, a, b, cfg)
        ms = time_offline(fn, flush, _reps_for(fn, flush), rounds=3)
        if best is None or ms < best[0]:
            best = (ms, cfg)
    if best is None:
        raise RuntimeError(f"no config compiled and verified for {m}x{n}x{k}; see the log")
    return best[1], len(configs)


def _blas(library: str) -> Callable[[], None]:
    def select() -> None:
        torch.backends.cuda.preferred_blas_library(library)  # type: ignore[arg-type]

    return select


def measure_shape(
    m: int, n: int, k: int, cfg: HgemmConfig, device: torch.device, trials: int, seed: int
) -> ShapeResult:
    """Tuned kernel vs torch.matmul vs cuBLASLt (heuristic) on fresh inputs, in random order."""
    a, b = random_operands(m, n, k, device, seed=seed)
    ref = reference(a, b)
    default_blas = str(torch.backends.cuda.preferred_blas_library()).split(".")[-1].lower()
    fns: dict[str, GemmFn] = {
        "kforge": functools.partial(hgemm, a, b, cfg),
        "torch": functools.partial(torch.matmul, a, b),
        "cublaslt": functools.partial(torch.matmul, a, b),
    }
    setups: dict[str, Callable[[], None]] = {
        "kforge": _blas(default_blas),
        "torch": _blas(default_blas),
        "cublaslt": _blas("cublaslt"),
    }
    order = list(fns)
    random.Random(seed).shuffle(order)
    errs = {}
    for name in order:
        setups[name]()
        errs[name] = relative_error(fns[name](), ref)
    timer = Timer(device, trials=trials, max_seconds=1.0)
    flush = timer._flush
    assert flush is not None
    offline = {}
    for name in order:
        setups[name]()
        offline[name] = time_offline(fns[name], flush, _reps_for(fns[name], flush))

    def idle_then(name: str) -> Callable[[], None]:
        def before() -> None:
            setups[name]()
            time.sleep(SERVER_IDLE_S)

        return before

    server = timer.time_many({n_: fns[n_] for n_ in order}, before_each={n_: idle_then(n_) for n_ in order})
    setups["kforge"]()
    errs["kforge"] = max(errs["kforge"], relative_error(fns["kforge"](), ref))  # after reuse of the counters
    return ShapeResult(
        m, n, k, cfg.name,
        offline["kforge"], offline["torch"], offline["cublaslt"],
        server["kforge"].median_ms, server["torch"].median_ms, server["cublaslt"].median_ms,
        errs["kforge"], errs["torch"], errs["cublaslt"], 0, "/".join(order),
    )  # fmt: skip
