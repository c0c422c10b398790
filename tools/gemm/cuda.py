"""CUDA C++ candidates for ``tools/gemm/kernels.py``'s fp16 GEMM: tensor-core kernels written by hand,
built once per machine by ``torch.utils.cpp_extension.load_inline`` and launched from C++.

The kernel is the Ampere-style multistage GEMM that Hopper still runs: ``cp.async`` copies
16-byte chunks of the A (BM x BK) and B (BK x BN) tiles into a ring of STAGES shared-memory
buffers (rows padded by 16 bytes, so ``ldmatrix``'s eight row reads hit eight different bank
groups), ``ldmatrix`` (``.trans`` for row-major B) loads the fragments, and
``mma.sync.m16n8k16`` accumulates in fp32; the C fragments are rounded to fp16 once and
stored as half2 pairs. Rows past M and chunks past N or K are zero-filled by the copy, so any
M works; K and N must be multiples of 8 and the operands 16-byte aligned. With ``split`` > 1
the grid's z axis splits the K loop and the slice that arrives last at a tile's counter sums
the fp32 partials, in the same launch (as the Triton split-K kernel does).

What it is for: ``mma.sync`` reaches well under wgmma's peak on an H100, so it cannot win a
GPU-bound shape; it is here for the small host-bound ones, where a launch through one C++
function might beat Triton's launcher (measured: it does not, see
docs/log/2026-11-23-hgemm-stream-k-and-cuda.md). The
search keeps it where it measures fastest.
"""

from __future__ import annotations

import functools
import inspect
import os
import shutil
from typing import Any

import torch

# (BM, BN, BK, warps along M, warps along N, STAGES). Warp tiles are multiples of 16 x 16.
CUDA_TILES = [
    (128, 256, 32, 4, 4, 3),
    (128, 128, 32, 2, 4, 4),
    (128, 64, 32, 2, 2, 4),
    (64, 128, 32, 2, 2, 4),
    (64, 64, 64, 2, 2, 3),
    (64, 256, 32, 2, 4, 4),
    (32, 64, 64, 1, 2, 4),
    (16, 64, 64, 1, 2, 4),
]
# (warp tiles of 64 x 64 would hold 128 fp32 accumulators a thread and spill: none here)

KERNEL_SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace kforge_hgemm {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool pred) {
  // src-size 0 zero-fills the 16 bytes: rows past M, chunks past N or K
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(smem_addr(dst)), "l"(src), "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void mma16816(float* d, const unsigned* a, const unsigned* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES>
struct Tile {
  static constexpr int THREADS = WM * WN * 32;
  static constexpr int LDA = BK + 8;  // padded rows: 16 bytes more than the tile
  static constexpr int LDB = BN + 8;
  static constexpr int A_STAGE = BM * LDA;
  static constexpr int B_STAGE = BK * LDB;
  static constexpr int SMEM = STAGES * (A_STAGE + B_STAGE) * 2;
  static constexpr int TM = BM / WM, TN = BN / WN, MI = TM / 16, NI = TN / 8;
  static_assert(TM % 16 == 0 && TN % 16 == 0 && BK % 16 == 0, "warp tiles of 16 x 16 multiples");
  static_assert((BM * BK / 8) % THREADS == 0 && (BK * BN / 8) % THREADS == 0, "whole chunks a thread");
};

template <int BM, int BN, int BK, int WM, int WN, int STAGES>
__global__ void __launch_bounds__(WM * WN * 32)
hgemm_mma(const half* __restrict__ A, const half* __restrict__ B, half* __restrict__ C,
          float* __restrict__ ws, int* __restrict__ locks, int M, int N, int K, int lda, int ldb,
          int split) {
  using T = Tile<BM, BN, BK, WM, WN, STAGES>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  half* As = reinterpret_cast<half*>(smem_raw);
  half* Bs = As + STAGES * T::A_STAGE;

  // Grouped tile order (8 row tiles share B's column tiles in L2), as the Triton kernels do.
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int pid = blockIdx.x, group = 8 * tiles_n;
  const int first_m = (pid / group) * 8;
  const int rows = min(tiles_m - first_m, 8);
  const int m0 = (first_m + (pid % group) % rows) * BM;
  const int n0 = ((pid % group) / rows) * BN;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WN, wn = warp % WN;
  const int k_tiles = (K + BK - 1) / BK;
  const int per_slice = (k_tiles + split - 1) / split;
  const int kt0 = blockIdx.z * per_slice;
  const int count = max(0, min(k_tiles, kt0 + per_slice) - kt0);

  auto load = [&](int stage, int kt) {
    const int k0 = kt * BK;
    half* as = As + stage * T::A_STAGE;
    half* bs = Bs + stage * T::B_STAGE;
#pragma unroll
    for (int i = 0; i < BM * BK / 8 / T::THREADS; ++i) {
      const int c = tid + i * T::THREADS, r = c / (BK / 8), col = (c % (BK / 8)) * 8;
      const bool ok = m0 + r < M && k0 + col < K;
      cp_async16(as + r * T::LDA + col, ok ? A + (int64_t)(m0 + r) * lda + k0 + col : A, ok);
    }
#pragma unroll
    for (int i = 0; i < BK * BN / 8 / T::THREADS; ++i) {
      const int c = tid + i * T::THREADS, r = c / (BN / 8), col = (c % (BN / 8)) * 8;
      const bool ok = k0 + r < K && n0 + col < N;
      cp_async16(bs + r * T::LDB + col, ok ? B + (int64_t)(k0 + r) * ldb + n0 + col : B, ok);
    }
  };

  float acc[T::MI][T::NI][4];
#pragma unroll
  for (int i = 0; i < T::MI; ++i)
#pragma unroll
    for (int j = 0; j < T::NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < count) load(s, kt0 + s);
    cp_async_commit();
  }
  for (int t = 0; t < count; ++t) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // tile t landed for every thread; the stage refilled below is free
    if (t + STAGES - 1 < count) load((t + STAGES - 1) % STAGES, kt0 + t + STAGES - 1);
    cp_async_commit();
    const half* as = As + (t % STAGES) * T::A_STAGE + (wm * T::TM) * T::LDA;
    const half* bs = Bs + (t % STAGES) * T::B_STAGE + wn * T::TN;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      unsigned a[T::MI][4], b[T::NI][2];
#pragma unroll
      for (int i = 0; i < T::MI; ++i)
        ldmatrix_x4(a[i], as + (i * 16 + (lane & 15)) * T::LDA + kk + (lane >> 4) * 8);
#pragma unroll
      for (int j = 0; j < T::NI; j += 2) {
        unsigned r[4];
        ldmatrix_x4_trans(r, bs + (kk + (lane & 15)) * T::LDB + j * 8 + (lane >> 4) * 8);
        b[j][0] = r[0]; b[j][1] = r[1]; b[j + 1][0] = r[2]; b[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < T::MI; ++i)
#pragma unroll
        for (int j = 0; j < T::NI; ++j) mma16816(acc[i][j], a[i], b[j]);
    }
  }
  cp_async_wait<0>();

  // Each thread's C fragments: a pair of adjacent columns (c, c + 1) at row r, for every
  // (m16, n8) tile i, j of its warp and each half h (rows +0 and +8); pairs past M or N skipped.
  const int row0 = m0 + wm * T::TM + (lane >> 2), col0 = n0 + wn * T::TN + (lane & 3) * 2;
  auto each_pair = [&](auto&& f) {
#pragma unroll
    for (int i = 0; i < T::MI; ++i)
#pragma unroll
      for (int j = 0; j < T::NI; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = row0 + i * 16 + h * 8, c = col0 + j * 8;
          if (r < M && c < N) f(acc[i][j] + 2 * h, (int64_t)r * N + c);
        }
  };
  if (split > 1) {
    // Leave this slice's fp32 partial; the last slice at the tile's counter sums them.
    float* part = ws + (int64_t)blockIdx.z * M * N;
    each_pair([&](float* v, int64_t at) { *reinterpret_cast<float2*>(part + at) = make_float2(v[0], v[1]); });
    __threadfence();
    __syncthreads();
    __shared__ int last;
    if (tid == 0) last = atomicAdd(locks + pid, 1) == split - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int s = 0; s < split; ++s) {
      if (s == (int)blockIdx.z) continue;
      const float* other = ws + (int64_t)s * M * N;
      each_pair([&](float* v, int64_t at) {
        const float2 o = __ldcg(reinterpret_cast<const float2*>(other + at));
        v[0] += o.x;
        v[1] += o.y;
      });
    }
    if (tid == 0) locks[pid] = 0;  // ready for the next call
  }
  each_pair([&](float* v, int64_t at) { *reinterpret_cast<half2*>(C + at) = __floats2half2_rn(v[0], v[1]); });
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES>
int launch(const void* a, const void* b, void* c, float* ws, int* locks, int M, int N, int K,
           int lda, int ldb, int split, int device, cudaStream_t stream) {
  using T = Tile<BM, BN, BK, WM, WN, STAGES>;
  auto kernel = hgemm_mma<BM, BN, BK, WM, WN, STAGES>;
  static uint64_t opted_in = 0;  // devices where the kernel may take > 48 KiB of shared memory
  if (device < 64 && !(opted_in >> device & 1)) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::SMEM);
    if (err != cudaSuccess) return (int)err;
    opted_in |= 1ull << device;
  }
  const int tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  kernel<<<dim3(tiles, 1, split), T::THREADS, T::SMEM, stream>>>(
      static_cast<const half*>(a), static_cast<const half*>(b), static_cast<half*>(c), ws, locks,
      M, N, K, lda, ldb, split);
  return (int)cudaGetLastError();
}

}  // namespace kforge_hgemm

int kforge_hgemm_launch(int tile, const void* a, const void* b, void* c, float* ws, int* locks,
                        int M, int N, int K, int lda, int ldb, int split, int device,
                        cudaStream_t stream) {
  switch (tile) {
@CASES@
    default: return -1;
  }
}
"""

BINDING_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

int kforge_hgemm_launch(int tile, const void* a, const void* b, void* c, float* ws, int* locks,
                        int M, int N, int K, int lda, int ldb, int split, int device,
                        cudaStream_t stream);

// C (M, N, contiguous) = A @ B with tile config `tile` of CUDA_TILES; `ws` (split, M, N) fp32
// and `locks` (one zeroed int a tile) serve split-K. Operands: fp16, row-major, 16-byte aligned
// rows (the Python side checks on a shape's first call and the pointers' alignment on every
// call); C comes from the caller, as the Triton launch's does.
void hgemm(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c, const torch::Tensor& ws,
           const torch::Tensor& locks, int64_t tile, int64_t split) {
  const c10::cuda::CUDAGuard guard(a.device());
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  const int err = kforge_hgemm_launch(
      (int)tile, a.data_ptr(), b.data_ptr(), c.data_ptr(), split > 1 ? ws.data_ptr<float>() : nullptr,
      locks.data_ptr<int>(), (int)M, (int)N, (int)K, (int)a.stride(0), (int)b.stride(0), (int)split,
      a.get_device(), at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == 0, "kforge hgemm CUDA launch failed (tile ", tile, "): error ", err);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("hgemm", &hgemm); }
"""


def kernel_source() -> str:
    """The CUDA source with one ``launch`` instantiation per entry of CUDA_TILES."""
    cases = "\n".join(
        f"    case {i}: return kforge_hgemm::launch<{', '.join(map(str, t))}>("
        "a, b, c, ws, locks, M, N, K, lda, ldb, split, device, stream);"
        for i, t in enumerate(CUDA_TILES)
    )
    return KERNEL_SOURCE.replace("@CASES@", cases)


def tile_index(block_m: int, block_n: int, block_k: int, num_warps: int, num_stages: int) -> int:
    """The CUDA_TILES entry with these sizes, warps and stages; ValueError if there is none."""
    for i, (bm, bn, bk, wm, wn, stages) in enumerate(CUDA_TILES):
        if (bm, bn, bk, wm * wn, stages) == (block_m, block_n, block_k, num_warps, num_stages):
            return i
    raise ValueError(
        f"no CUDA C++ kernel for {block_m}x{block_n}x{block_k} with {num_warps} warps and "
        f"{num_stages} stages; the built ones are tools/gemm/cuda.py's CUDA_TILES"
    )


@functools.cache
def unavailable() -> str | None:
    """Why the CUDA C++ kernels cannot be built here, or None: they need a CUDA GPU, nvcc
    (CUDA_HOME or PATH) and ninja, as ``load_inline`` does. Asked once a process (the ninja
    check runs a subprocess; the search asks per shape)."""
    from torch.utils import cpp_extension

    if not torch.cuda.is_available():
        return "no CUDA GPU"
    if cpp_extension.CUDA_HOME is None and shutil.which("nvcc") is None:
        return "nvcc not found (set CUDA_HOME)"
    if not cpp_extension.is_ninja_available():
        return "ninja not found (pip install ninja)"
    return None


def extension() -> Any:
    """The built extension (``load_inline`` caches the build under TORCH_EXTENSIONS_DIR by
    source hash: the first build on a machine takes a minute, later ones load it). A failed
    build raises RuntimeError, and so does every later call, without building again."""
    built, error = _build()
    if error:
        raise RuntimeError(f"kforge's CUDA C++ GEMM kernels cannot be built: {error}")
    return built


@functools.cache
def _build() -> tuple[Any, str]:
    why = unavailable()
    if why is not None:
        return None, why
    try:
        return _load_inline(), ""
    except Exception as exc:  # a compiler's failure: its last line (the error), the rest went to stderr
        return None, f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"


def _load_inline() -> Any:
    from torch.utils.cpp_extension import load_inline

    major, minor = torch.cuda.get_device_capability()
    # Without torch's headers in the .cu (they are most of a build's time) where torch allows.
    parameters = inspect.signature(load_inline).parameters
    quiet = {"no_implicit_headers": True} if "no_implicit_headers" in parameters else {}
    arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list or f"{major}.{minor}"  # this GPU's, unless set
    try:
        return load_inline(
            name="kforge_hgemm_cuda",
            cpp_sources=BINDING_SOURCE,
            cuda_sources=kernel_source(),
            extra_cuda_cflags=["-O3"],
            verbose=False,
            **quiet,
        )
    finally:
        if arch_list is None:
            del os.environ["TORCH_CUDA_ARCH_LIST"]
