"""diag(A) @ B as a CUDA row-scaling kernel, out[i, j] = A[i] * B[i, j].

The N x N diagonal matrix is never formed and no matrix product runs: a grid-stride
loop over the N * M outputs multiplies each element of B by the entry of A for its row.
That replaces 2 * N * N * M FLOPs with N * M multiplies.

Memory traffic: one read of B, one write of the output, and A (N floats) from L1/L2; the
kernel runs at memory bandwidth. Indices are 64-bit.
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

constexpr int THREADS = 256;

__global__ void __launch_bounds__(THREADS) diag_scale_rows_kernel(
    const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
    int64_t n_elements, int64_t n_cols) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_elements; i += stride) {
    out[i] = a[i / n_cols] * b[i];
  }
}

torch::Tensor diag_matmul(torch::Tensor a, torch::Tensor b) {
  CHECK_INPUT(a);
  CHECK_INPUT(b);
  TORCH_CHECK(a.dim() == 1 && b.dim() == 2 && b.size(0) == a.size(0), "expected A (N,) and B (N, M)");
  const c10::cuda::OptionalCUDAGuard guard(b.device());
  auto out = torch::empty_like(b);
  const int64_t n = b.numel();
  if (n == 0) return out;
  const int64_t blocks = std::min<int64_t>((n + THREADS - 1) / THREADS, 65535LL * 8);
  diag_scale_rows_kernel<<<(unsigned)blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n, b.size(1));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

cpp_source = "torch::Tensor diag_matmul(torch::Tensor a, torch::Tensor b);"

diag_matmul_ext = load_inline(
    name="kforge_example_diag_matmul",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["diag_matmul"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return diag_matmul_ext.diag_matmul(A.contiguous(), B.contiguous())
