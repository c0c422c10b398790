"""Sum over one dimension (keepdim) in CUDA, for any contiguous tensor and reduced dimension.

The input is viewed as (outer, R, inner), R being the reduced dimension. A block of
32 x 8 threads owns 32 adjacent outputs of one outer index: thread (tx, ty) sums rows
ty, ty + 8, ty + 16, ... of column tx, so each warp reads 32 consecutive floats of one
row (coalesced 128-byte loads). The 8 partial sums per column are then added in shared
memory after a __syncthreads. Outer indices beyond the grid's y limit are covered by a
grid-stride loop.

Memory traffic: one read of the input, one write of outer * inner floats. If the
reduced dimension is the innermost (inner = 1) the kernel is still correct but its loads
are strided; that is not the task's case. Offsets are 64-bit.
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

constexpr int COLS = 32;  // blockDim.x: adjacent outputs per block
constexpr int ROWS = 8;   // blockDim.y: row phases summed in parallel

__global__ void __launch_bounds__(COLS * ROWS) sum_middle_kernel(
    const float* __restrict__ x, float* __restrict__ y, int64_t outer, int64_t R, int64_t inner) {
  __shared__ float partial[ROWS][COLS + 1];
  const int64_t col = (int64_t)blockIdx.x * COLS + threadIdx.x;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    float acc = 0.f;
    if (col < inner) {
      const float* base = x + o * R * inner + col;
      for (int64_t r = threadIdx.y; r < R; r += ROWS) acc += base[r * inner];
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < inner) {
      float total = 0.f;
#pragma unroll
      for (int i = 0; i < ROWS; ++i) total += partial[i][threadIdx.x];
      y[o * inner + col] = total;
    }
    __syncthreads();  // partial is rewritten by the next outer index
  }
}

torch::Tensor sum_keepdim(torch::Tensor x, int64_t dim) {
  CHECK_INPUT(x);
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  const int64_t nd = x.dim();
  if (dim < 0) dim += nd;
  TORCH_CHECK(dim >= 0 && dim < nd, "dim out of range");
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= x.size(i);
  for (int64_t i = dim + 1; i < nd; ++i) inner *= x.size(i);
  const int64_t R = x.size(dim);
  std::vector<int64_t> out_shape = x.sizes().vec();
  out_shape[dim] = 1;
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto y = torch::empty(out_shape, x.options());
  if (outer == 0 || inner == 0) return y;
  const int64_t grid_x = (inner + COLS - 1) / COLS;
  TORCH_CHECK(grid_x <= INT_MAX, "inner size too large");
  const dim3 grid((unsigned)grid_x, (unsigned)std::min<int64_t>(outer, 65535));
  const dim3 block(COLS, ROWS);
  sum_middle_kernel<<<grid, block, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), outer, R, inner);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor sum_keepdim(torch::Tensor x, int64_t dim);"

row_sum_ext = load_inline(
    name="kforge_example_row_sum",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["sum_keepdim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return row_sum_ext.sum_keepdim(x.contiguous(), self.dim)
