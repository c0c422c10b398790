"""Row softmax in CUDA: one block per row, an online (max, sum) pass, then a write pass.

Each of the block's 512 threads sweeps the row with stride 512 (coalesced) keeping its
own running max m and sum s of exp(x - m), rescaled when m grows. The (m, s) pairs are
merged with __shfl_xor_sync inside each warp, then across warps through shared memory,
into the row's max and normaliser. A second sweep writes exp(x - m) / s.

Memory traffic: the row is read twice (the second read of a 32 KB row mostly hits
L1/L2) and written once. expf, not __expf, keeps the result within strict fp32 error.
Row offsets are 64-bit, so the matrix may exceed 2^31 elements.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#define CHECK_INPUT(x)                                                     \
  TORCH_CHECK((x).is_cuda(), #x " must be a CUDA tensor");                 \
  TORCH_CHECK((x).is_contiguous(), #x " must be contiguous");              \
  TORCH_CHECK((x).scalar_type() == torch::kFloat32, #x " must be float32")

constexpr int THREADS = 512;  // a multiple of 32

// Merge (m2, s2) into (m, s): both are (max, sum of exp(x - max)) over disjoint sets.
__device__ __forceinline__ void merge_max_sum(float& m, float& s, float m2, float s2) {
  const float m_new = fmaxf(m, m2);
  if (m_new == -INFINITY) return;  // both sets empty so far: keep (-inf, 0)
  s = s * expf(m - m_new) + s2 * expf(m2 - m_new);
  m = m_new;
}

__global__ void __launch_bounds__(THREADS) softmax_kernel(
    const float* __restrict__ x, float* __restrict__ y, int64_t n_cols) {
  __shared__ float warp_m[32];
  __shared__ float warp_s[32];
  const int64_t row = blockIdx.x;
  const float* x_row = x + row * n_cols;
  float* y_row = y + row * n_cols;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int num_warps = blockDim.x / 32;

  float m = -INFINITY, s = 0.f;
  for (int64_t i = threadIdx.x; i < n_cols; i += blockDim.x) {
    const float v = x_row[i];
    if (v > m) {
      s = s * expf(m - v) + 1.f;
      m = v;
    } else if (m != -INFINITY) {
      s += expf(v - m);
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffff, m, offset);
    const float s2 = __shfl_xor_sync(0xffffffff, s, offset);
    merge_max_sum(m, s, m2, s2);
  }
  if (lane == 0) {
    warp_m[warp] = m;
    warp_s[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    m = lane < num_warps ? warp_m[lane] : -INFINITY;
    s = lane < num_warps ? warp_s[lane] : 0.f;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffff, m, offset);
      const float s2 = __shfl_xor_sync(0xffffffff, s, offset);
      merge_max_sum(m, s, m2, s2);
    }
    if (lane == 0) {
      warp_m[0] = m;
      warp_s[0] = s;
    }
  }
  __syncthreads();
  const float row_max = warp_m[0];
  const float inv_sum = 1.f / warp_s[0];

  for (int64_t i = threadIdx.x; i < n_cols; i += blockDim.x) {
    y_row[i] = expf(x_row[i] - row_max) * inv_sum;
  }
}

torch::Tensor softmax_lastdim(torch::Tensor x) {
  CHECK_INPUT(x);
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto y = torch::empty_like(x);
  const int64_t n_cols = x.size(-1);
  if (x.numel() == 0) return y;
  const int64_t n_rows = x.numel() / n_cols;
  TORCH_CHECK(n_rows <= INT_MAX, "too many rows");
  softmax_kernel<<<(unsigned)n_rows, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), n_cols);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor softmax_lastdim(torch::Tensor x);"

softmax_ext = load_inline(
    name="kforge_example_softmax",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["softmax_lastdim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_ext.softmax_lastdim(x.contiguous())
