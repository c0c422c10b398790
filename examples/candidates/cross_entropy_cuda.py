"""Mean cross-entropy of (batch, classes) logits and int64 targets, in two CUDA kernels.

Kernel 1, one 512-thread block per row: each thread keeps a running (max, sum of
exp(x - max)) over a strided slice of the row; the pairs are merged with
__shfl_xor_sync in each warp and through shared memory across warps into the row's
log-sum-exp, and thread 0 stores loss[row] = logsumexp - logits[row, target[row]].
Kernel 2, one block: sums the batch losses in a fixed order and divides by the batch
size (deterministic, no atomics).

Memory traffic: one read of the logits, the int64 targets, and a batch-sized float
buffer. Targets must lie in [0, classes), as get_inputs() makes them; ignore_index and
label smoothing are not handled, and an out-of-range target gives NaN instead of an
out-of-bounds read. Row offsets are 64-bit.
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
  TORCH_CHECK((x).is_contiguous(), #x " must be contiguous")

constexpr int ROW_THREADS = 512;   // a multiple of 32
constexpr int MEAN_THREADS = 1024; // a multiple of 32

__device__ __forceinline__ void merge_max_sum(float& m, float& s, float m2, float s2) {
  const float m_new = fmaxf(m, m2);
  if (m_new == -INFINITY) return;  // both sets empty so far: keep (-inf, 0)
  s = s * expf(m - m_new) + s2 * expf(m2 - m_new);
  m = m_new;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffff, v, offset);
  return v;
}

__global__ void __launch_bounds__(ROW_THREADS) cross_entropy_rows_kernel(
    const float* __restrict__ logits, const int64_t* __restrict__ targets, float* __restrict__ losses,
    int64_t n_classes) {
  __shared__ float warp_m[32];
  __shared__ float warp_s[32];
  const int64_t row = blockIdx.x;
  const float* x_row = logits + row * n_classes;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;

  float m = -INFINITY, s = 0.f;
  for (int64_t i = threadIdx.x; i < n_classes; i += blockDim.x) {
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
    m = lane < (int)(blockDim.x / 32) ? warp_m[lane] : -INFINITY;
    s = lane < (int)(blockDim.x / 32) ? warp_s[lane] : 0.f;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffff, m, offset);
      const float s2 = __shfl_xor_sync(0xffffffff, s, offset);
      merge_max_sum(m, s, m2, s2);
    }
    if (lane == 0) {
      const int64_t t = targets[row];
      const bool valid = t >= 0 && t < n_classes;
      losses[row] = valid ? (m + logf(s)) - x_row[t] : NAN;
    }
  }
}

__global__ void __launch_bounds__(MEAN_THREADS) mean_kernel(
    const float* __restrict__ values, float* __restrict__ out, int64_t n) {
  __shared__ float scratch[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  float acc = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += values[i];
  acc = warp_sum(acc);
  if (lane == 0) scratch[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < (int)(blockDim.x / 32) ? scratch[lane] : 0.f;
    acc = warp_sum(acc);
    if (lane == 0) out[0] = acc / (float)n;
  }
}

torch::Tensor cross_entropy_mean(torch::Tensor logits, torch::Tensor targets) {
  CHECK_INPUT(logits);
  CHECK_INPUT(targets);
  TORCH_CHECK(logits.scalar_type() == torch::kFloat32, "logits must be float32");
  TORCH_CHECK(targets.scalar_type() == torch::kInt64, "targets must be int64");
  TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
              "expected (B, C) logits and (B,) targets");
  const int64_t n_rows = logits.size(0), n_classes = logits.size(1);
  TORCH_CHECK(n_rows > 0 && n_rows <= INT_MAX && n_classes > 0, "unsupported sizes");
  const c10::cuda::OptionalCUDAGuard guard(logits.device());
  auto losses = torch::empty({n_rows}, logits.options());
  auto out = torch::empty({}, logits.options());
  auto stream = c10::cuda::getCurrentCUDAStream();
  cross_entropy_rows_kernel<<<(unsigned)n_rows, ROW_THREADS, 0, stream>>>(
      logits.data_ptr<float>(), targets.data_ptr<int64_t>(), losses.data_ptr<float>(), n_classes);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  mean_kernel<<<1, MEAN_THREADS, 0, stream>>>(losses.data_ptr<float>(), out.data_ptr<float>(), n_rows);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

cpp_source = "torch::Tensor cross_entropy_mean(torch::Tensor logits, torch::Tensor targets);"

cross_entropy_ext = load_inline(
    name="kforge_example_cross_entropy",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["cross_entropy_mean"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return cross_entropy_ext.cross_entropy_mean(predictions.contiguous(), targets.contiguous())
