"""Scaled dot-product attention in CUDA: a straightforward tiled kernel with an online softmax.

One 256-thread block per (32 query rows, batch * head). The Q tile stays in shared
memory; the block walks K and V in 32-row tiles, each step in three phases separated by
__syncthreads:
  1. scores: thread (row r = tid / 8, lane g = tid % 8) computes S[r, g + 8t], t < 4,
     as fp32 dot products over the head dimension, times 1/sqrt(d); keys past the end
     get -inf;
  2. online softmax: warp w owns rows 4w..4w+3, one key per lane; warp max and sum via
     __shfl_xor_sync give the new running max m, the rescale factor
     alpha = exp(m_old - m_new) and the running normaliser l; P overwrites S;
  3. output: each thread keeps its row's head-dimension slice g, g + 8, ... of the
     accumulator in registers: acc = acc * alpha + P V.
The output is acc / l. Shared rows are padded to d + 1 floats so that the eight keys a
warp reads at once fall in different banks.

Memory traffic: Q is read once, K and V once per 32-query tile (mostly from L2), the
output written once; the (seq, seq) scores never leave the chip, where eager PyTorch
writes and re-reads them several times. Plain fp32 FMAs and expf (strict fp32).
Supports head_dim up to 128; sequence tails are masked; offsets are 64-bit.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cmath>

#define CHECK_INPUT(x)                                                     \
  TORCH_CHECK((x).is_cuda(), #x " must be a CUDA tensor");                 \
  TORCH_CHECK((x).is_contiguous(), #x " must be contiguous");              \
  TORCH_CHECK((x).scalar_type() == torch::kFloat32, #x " must be float32")

constexpr int BQ = 32;        // query rows per block
constexpr int BKV = 32;       // key/value rows per step (one per lane in phase 2)
constexpr int THREADS = 256;  // 8 threads per query row
constexpr int MAX_D = 128;
constexpr int D_PER_THREAD = MAX_D / 8;

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffff, v, offset);
  return v;
}

__host__ __device__ constexpr size_t attention_smem_floats(int D) {
  return (size_t)(BQ + 2 * BKV) * (D + 1) + BQ * (BKV + 1) + 3 * BQ;
}

__global__ void __launch_bounds__(THREADS) attention_kernel(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
    float* __restrict__ o, int S, int D, float scale) {
  extern __shared__ float smem[];
  const int ld = D + 1;
  float* qs = smem;                      // [BQ][ld]
  float* ks = qs + BQ * ld;              // [BKV][ld]
  float* vs = ks + BKV * ld;             // [BKV][ld]
  float* ps = vs + BKV * ld;             // [BQ][BKV + 1] scores, then probabilities
  float* row_m = ps + BQ * (BKV + 1);    // [BQ] running max
  float* row_l = row_m + BQ;             // [BQ] running normaliser
  float* row_alpha = row_l + BQ;         // [BQ] rescale factor of the current step

  const int64_t head_offset = (int64_t)blockIdx.y * S * D;
  const float* qh = q + head_offset;
  const float* kh = k + head_offset;
  const float* vh = v + head_offset;
  float* oh = o + head_offset;
  const int q0 = blockIdx.x * BQ;
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int r_own = tid / 8;  // query row in phases 1 and 3
  const int g = tid % 8;      // key lane in phase 1, head-dim lane in phase 3

  for (int e = tid; e < BQ * D; e += THREADS) {
    const int r = e / D, c = e % D;
    qs[r * ld + c] = (q0 + r < S) ? qh[(int64_t)(q0 + r) * D + c] : 0.f;
  }
  if (tid < BQ) {
    row_m[tid] = -INFINITY;
    row_l[tid] = 0.f;
  }
  float acc[D_PER_THREAD];
#pragma unroll
  for (int i = 0; i < D_PER_THREAD; ++i) acc[i] = 0.f;

  for (int kv0 = 0; kv0 < S; kv0 += BKV) {
    __syncthreads();  // Q and row state ready; the previous step is done with ks, vs, ps
    for (int e = tid; e < BKV * D; e += THREADS) {
      const int r = e / D, c = e % D;
      const bool ok = kv0 + r < S;
      ks[r * ld + c] = ok ? kh[(int64_t)(kv0 + r) * D + c] : 0.f;
      vs[r * ld + c] = ok ? vh[(int64_t)(kv0 + r) * D + c] : 0.f;
    }
    __syncthreads();

    // Phase 1: scores.
    float sc[BKV / 8];
#pragma unroll
    for (int t = 0; t < BKV / 8; ++t) sc[t] = 0.f;
    for (int d = 0; d < D; ++d) {
      const float qv = qs[r_own * ld + d];
#pragma unroll
      for (int t = 0; t < BKV / 8; ++t) sc[t] = fmaf(qv, ks[(g + 8 * t) * ld + d], sc[t]);
    }
#pragma unroll
    for (int t = 0; t < BKV / 8; ++t) {
      const int j = g + 8 * t;
      ps[r_own * (BKV + 1) + j] = (kv0 + j < S) ? sc[t] * scale : -INFINITY;
    }
    __syncthreads();

    // Phase 2: online softmax, one warp per 4 rows, one key per lane. The tile holds at
    // least one valid key, so m_new is finite and exp(-inf - m_new) = 0.
#pragma unroll
    for (int rr = 0; rr < BQ / 8; ++rr) {
      const int r = warp * (BQ / 8) + rr;
      const float s = ps[r * (BKV + 1) + lane];
      const float m_old = row_m[r];
      const float m_new = fmaxf(m_old, warp_max(s));
      const float p = expf(s - m_new);
      const float p_sum = warp_sum(p);
      ps[r * (BKV + 1) + lane] = p;
      __syncwarp();  // every lane has read row_m[r] before lane 0 updates it
      if (lane == 0) {
        const float alpha = expf(m_old - m_new);
        row_alpha[r] = alpha;
        row_l[r] = row_l[r] * alpha + p_sum;
        row_m[r] = m_new;
      }
    }
    __syncthreads();

    // Phase 3: acc = acc * alpha + P V for this thread's row and head-dim slice.
    const float alpha = row_alpha[r_own];
#pragma unroll
    for (int i = 0; i < D_PER_THREAD; ++i) acc[i] *= alpha;
    for (int j = 0; j < BKV; ++j) {
      const float p = ps[r_own * (BKV + 1) + j];
#pragma unroll
      for (int i = 0; i < D_PER_THREAD; ++i) {
        const int d = g + 8 * i;
        if (d < D) acc[i] = fmaf(p, vs[j * ld + d], acc[i]);
      }
    }
  }

  // row_l was last written before the final phase-3 barrier, so it is visible here.
  if (q0 + r_own < S) {
    const float inv_l = 1.f / row_l[r_own];
    float* out_row = oh + (int64_t)(q0 + r_own) * D;
#pragma unroll
    for (int i = 0; i < D_PER_THREAD; ++i) {
      const int d = g + 8 * i;
      if (d < D) out_row[d] = acc[i] * inv_l;
    }
  }
}

torch::Tensor attention_forward(torch::Tensor q, torch::Tensor k, torch::Tensor v) {
  CHECK_INPUT(q);
  CHECK_INPUT(k);
  CHECK_INPUT(v);
  TORCH_CHECK(q.dim() == 4 && q.sizes() == k.sizes() && q.sizes() == v.sizes(), "expected equal (B, H, S, D) shapes");
  const int64_t B = q.size(0), H = q.size(1), S = q.size(2), D = q.size(3);
  TORCH_CHECK(D >= 1 && D <= MAX_D, "head_dim must be in [1, 128]");
  TORCH_CHECK(S <= INT_MAX / 2 && B * H <= 65535, "sizes too large for this kernel");
  const c10::cuda::OptionalCUDAGuard guard(q.device());
  auto o = torch::empty_like(q);
  if (o.numel() == 0) return o;
  const size_t smem_bytes = attention_smem_floats((int)D) * sizeof(float);
  C10_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes));
  const dim3 grid((unsigned)((S + BQ - 1) / BQ), (unsigned)(B * H));
  attention_kernel<<<grid, THREADS, smem_bytes, c10::cuda::getCurrentCUDAStream()>>>(
      q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), o.data_ptr<float>(),
      (int)S, (int)D, (float)(1.0 / std::sqrt((double)D)));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return o;
}
"""

cpp_source = "torch::Tensor attention_forward(torch::Tensor q, torch::Tensor k, torch::Tensor v);"

attention_ext = load_inline(
    name="kforge_example_attention",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["attention_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return attention_ext.attention_forward(q.contiguous(), k.contiguous(), v.contiguous())
