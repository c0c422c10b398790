"""RMSNorm in CUDA: y = x * rsqrt(mean(x^2) + eps) * weight, one block per row.

Sweep 1 sums x^2 (per-thread partial sums, a __shfl_xor_sync butterfly in each warp,
then the warp partials through shared memory); sweep 2 writes x * inv_rms * weight.
Threads stride the row by the block size, so both sweeps are coalesced.

Memory traffic: one read of x and one write of y from DRAM (the second read of a 16 KB
row hits L1/L2; the weight is shared by all rows through L2), against about five full
passes for the eager kernels. 1 / sqrtf rather than rsqrtf keeps strict fp32 accuracy.
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

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffff, v, offset);
  return v;
}

__global__ void __launch_bounds__(THREADS) rmsnorm_kernel(
    const float* __restrict__ x, const float* __restrict__ weight, float* __restrict__ y,
    int64_t n_cols, float eps) {
  __shared__ float scratch[32];
  __shared__ float inv_rms_shared;
  const int64_t row = blockIdx.x;
  const float* x_row = x + row * n_cols;
  float* y_row = y + row * n_cols;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;

  float sq = 0.f;
  for (int64_t i = threadIdx.x; i < n_cols; i += blockDim.x) {
    const float v = x_row[i];
    sq += v * v;
  }
  sq = warp_sum(sq);
  if (lane == 0) scratch[warp] = sq;
  __syncthreads();
  if (warp == 0) {
    sq = lane < (int)(blockDim.x / 32) ? scratch[lane] : 0.f;
    sq = warp_sum(sq);
    if (lane == 0) inv_rms_shared = 1.f / sqrtf(sq / (float)n_cols + eps);
  }
  __syncthreads();
  const float inv_rms = inv_rms_shared;

  for (int64_t i = threadIdx.x; i < n_cols; i += blockDim.x) {
    y_row[i] = x_row[i] * inv_rms * weight[i];
  }
}

torch::Tensor rmsnorm_lastdim(torch::Tensor x, torch::Tensor weight, double eps) {
  CHECK_INPUT(x);
  CHECK_INPUT(weight);
  const int64_t n_cols = weight.numel();
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == n_cols, "last dimension of x must match weight");
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto y = torch::empty_like(x);
  if (x.numel() == 0) return y;
  const int64_t n_rows = x.numel() / n_cols;
  TORCH_CHECK(n_rows <= INT_MAX, "too many rows");
  rmsnorm_kernel<<<(unsigned)n_rows, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), weight.data_ptr<float>(), y.data_ptr<float>(), n_cols, (float)eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor rmsnorm_lastdim(torch::Tensor x, torch::Tensor weight, double eps);"

rmsnorm_ext = load_inline(
    name="kforge_example_rmsnorm",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["rmsnorm_lastdim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rmsnorm_ext.rmsnorm_lastdim(x.contiguous(), self.weight, self.eps)
