"""cuBLASLt's fp16 GEMM called directly (ctypes on the libcublasLt that torch loaded), so a
benchmark can time every algorithm its heuristic offers, not only the first one torch takes.

C = A @ B for row-major fp16 A (M, K) and B (K, N), fp32 compute and scale, fp16 C. cuBLASLt
is column-major: a row-major (R, C) matrix is a column-major (C, R) one, so the call computes
C^T (N x M) = B^T (N x K) @ A^T (K x M) with no transposes. Each algorithm gets a 32 MiB
workspace (torch's own cuBLASLt path passes a smaller one; CUDA-L2's passed none).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

CUBLAS_COMPUTE_32F = 68
CUDA_R_16F = 2
CUDA_R_32F = 0
PREF_MAX_WORKSPACE_BYTES = 1
WORKSPACE_BYTES = 32 * 1024 * 1024


class _Heuristic(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t: the opaque algo (8 x uint64), its workspace size,
    status, waves count and reserved words."""

    _fields_ = [
        ("algo", ctypes.c_uint64 * 8),
        ("workspace_size", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("waves_count", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


def library_path() -> Path:
    """The libcublasLt shared object this process has loaded (torch loads it on its first
    fp16 matmul), read from /proc/self/maps."""
    if not torch.cuda.is_initialized():
        raise RuntimeError("cuBLASLt: initialise CUDA (run a torch matmul on the GPU) first")
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        if "libcublasLt.so" in path:
            return Path(path)
    raise RuntimeError("cuBLASLt: torch has not loaded libcublasLt in this process (no CUDA matmul yet?)")


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"cuBLASLt: {what} returned status {status}")


class LtGemm:
    """One (M, N, K) problem's cuBLASLt descriptors and the algorithms its heuristic offers.
    ``run(i, a, b, c)`` writes A @ B into ``c`` with the i-th algorithm on the current stream."""

    def __init__(self, m: int, n: int, k: int, device: torch.device, max_algos: int = 32) -> None:
        self.lib = lib = ctypes.CDLL(str(library_path()))
        p = ctypes.c_void_p
        self.handle, self.desc, self.pref = p(), p(), p()
        self.layouts = [p(), p(), p()]  # B^T (N x K), A^T (K x M), C^T (N x M), column-major
        _check(lib.cublasLtCreate(ctypes.byref(self.handle)), "cublasLtCreate")
        _check(
            lib.cublasLtMatmulDescCreate(ctypes.byref(self.desc), CUBLAS_COMPUTE_32F, CUDA_R_32F),
            "cublasLtMatmulDescCreate",
        )
        for layout, (rows, cols) in zip(self.layouts, [(n, k), (k, m), (n, m)], strict=True):
            _check(
                lib.cublasLtMatrixLayoutCreate(
                    ctypes.byref(layout),
                    CUDA_R_16F,
                    ctypes.c_uint64(rows),
                    ctypes.c_uint64(cols),
                    ctypes.c_int64(rows),
                ),
                "cublasLtMatrixLayoutCreate",
            )
        _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(self.pref)), "cublasLtMatmulPreferenceCreate")
        ws = ctypes.c_uint64(WORKSPACE_BYTES)
        _check(
            lib.cublasLtMatmulPreferenceSetAttribute(
                self.pref, PREF_MAX_WORKSPACE_BYTES, ctypes.byref(ws), ctypes.c_size_t(ctypes.sizeof(ws))
            ),
            "cublasLtMatmulPreferenceSetAttribute",
        )
        results = (_Heuristic * max_algos)()
        found = ctypes.c_int(0)
        bt, at, ct = self.layouts
        _check(
            lib.cublasLtMatmulAlgoGetHeuristic(
                self.handle, self.desc, bt, at, ct, ct, self.pref, max_algos, results, ctypes.byref(found)
            ),
            "cublasLtMatmulAlgoGetHeuristic",
        )
        self.algos = [results[i] for i in range(found.value) if results[i].state == 0]
        self.workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self._alpha, self._beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        self._matmul = lib.cublasLtMatmul
        self._device_index = device.index or 0

    def run(self, index: int, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        algo = self.algos[index]
        bt, at, ct = self.layouts
        stream = torch._C._cuda_getCurrentRawStream(self._device_index)
        _check(
            self._matmul(
                self.handle, self.desc, ctypes.byref(self._alpha),
                ctypes.c_void_p(b.data_ptr()), bt, ctypes.c_void_p(a.data_ptr()), at,
                ctypes.byref(self._beta), ctypes.c_void_p(c.data_ptr()), ct, ctypes.c_void_p(c.data_ptr()), ct,
                ctypes.byref(algo.algo), ctypes.c_void_p(self.workspace.data_ptr()),
                ctypes.c_size_t(WORKSPACE_BYTES), ctypes.c_void_p(stream),
            ),
            "cublasLtMatmul",
        )  # fmt: skip
        return c

    def close(self) -> None:
        for layout in self.layouts:
            self.lib.cublasLtMatrixLayoutDestroy(layout)
        self.lib.cublasLtMatmulPreferenceDestroy(self.pref)
        self.lib.cublasLtMatmulDescDestroy(self.desc)
        self.lib.cublasLtDestroy(self.handle)
