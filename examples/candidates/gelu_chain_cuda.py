"""y = gelu(x * scale + bias) * sigmoid(x) as one CUDA elementwise kernel, exact erf GELU.

A grid-stride loop over the flattened (rows, features) tensor; element i uses
bias[i % features]. GELU is 0.5 * v * (1 + erff(v / sqrt(2))), the default form of
torch.nn.functional.gelu, and the sigmoid is 1 / (1 + expf(-x)); erff and expf (not the
fast-math intrinsics) keep strict fp32 accuracy.

Memory traffic: one read of x and one write of y (the bias vector comes from L1/L2),
where eager PyTorch reads and writes the whole tensor in each of five kernels. Indices
are 64-bit.
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

__global__ void __launch_bounds__(THREADS) gelu_chain_kernel(
    const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ y,
    int64_t n_elements, int64_t n_features, float scale) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_elements; i += stride) {
    const float xv = x[i];
    const float v = fmaf(xv, scale, bias[i % n_features]);
    const float gelu = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    const float sig = 1.f / (1.f + expf(-xv));
    y[i] = gelu * sig;
  }
}

torch::Tensor gelu_chain(torch::Tensor x, torch::Tensor bias, double scale) {
  CHECK_INPUT(x);
  CHECK_INPUT(bias);
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == bias.numel(), "last dimension of x must match bias");
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto y = torch::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return y;
  // Enough blocks to fill the GPU several times over; the loop covers the rest.
  const int64_t blocks = std::min<int64_t>((n + THREADS - 1) / THREADS, 65535LL * 8);
  gelu_chain_kernel<<<(unsigned)blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), n, bias.numel(), (float)scale);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor gelu_chain(torch::Tensor x, torch::Tensor bias, double scale);"

gelu_chain_ext = load_inline(
    name="kforge_example_gelu_chain",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["gelu_chain"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu_chain_ext.gelu_chain(x.contiguous(), self.bias, self.scale)
