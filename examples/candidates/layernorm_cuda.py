"""LayerNorm over the last dimension in CUDA: one block per row, three sweeps.

Sweep 1 sums the row, sweep 2 sums (x - mean)^2 (two-pass variance, no cancellation),
sweep 3 writes (x - mean) * rstd * weight + bias. Each sum is a block reduction: a
__shfl_xor_sync butterfly within each warp, then the per-warp partials through shared
memory. Threads stride the row by the block size, so every sweep is coalesced.

Memory traffic: one read of x and one write of y from DRAM; the re-reads of a 16 KB row
hit L1/L2, and weight and bias are shared by all rows through L2. Row offsets are
64-bit.
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

// Sum over the block; every thread gets the total. `scratch` holds 32 floats.
__device__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (int)(blockDim.x / 32) ? scratch[lane] : 0.f;
    v = warp_sum(v);
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

__global__ void __launch_bounds__(THREADS) layernorm_kernel(
    const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
    float* __restrict__ y, int64_t n_cols, float eps) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float* x_row = x + row * n_cols;
  float* y_row = y + row * n_cols;

  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < n_cols; i += blockDim.x) sum += x_row[i];
  const float mean = block_sum(sum, scratch) / (float)n_cols;

  float sq = 0.f;
  for (int64_t i = threadIdx.x; i < n_cols; i += blockDim.x) {
    const float d = x_row[i] - mean;
    sq += d * d;
  }
  const float var = block_sum(sq, scratch) / (float)n_cols;
  const float rstd = 1.f / sqrtf(var + eps);

  for (int64_t i = threadIdx.x; i < n_cols; i += blockDim.x) {
    y_row[i] = (x_row[i] - mean) * rstd * weight[i] + bias[i];
  }
}

torch::Tensor layernorm_lastdim(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
  CHECK_INPUT(x);
  CHECK_INPUT(weight);
  CHECK_INPUT(bias);
  const int64_t n_cols = weight.numel();
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == n_cols && bias.numel() == n_cols, "shape mismatch");
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto y = torch::empty_like(x);
  if (x.numel() == 0) return y;
  const int64_t n_rows = x.numel() / n_cols;
  TORCH_CHECK(n_rows <= INT_MAX, "too many rows");
  layernorm_kernel<<<(unsigned)n_rows, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
      n_cols, (float)eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor layernorm_lastdim(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);"

layernorm_ext = load_inline(
    name="kforge_example_layernorm",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["layernorm_lastdim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.ln = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm_ext.layernorm_lastdim(x.contiguous(), self.ln.weight, self.ln.bias, self.ln.eps)
