"""Nsight Compute view of one GEMM shape: the tuned Triton kernel and torch.matmul's cuBLAS
kernel, each run twice after warm-up. Run under ncu, e.g.
``ncu --section SpeedOfLight --section Occupancy --section LaunchStats python3 bench/bench_hgemm_profile.py M N K CONFIG``
(CONFIG as ``kforge gemm`` names it in results.csv)."""

import sys

import torch
from kforge.tools.gemm.kernels import HgemmConfig, hgemm

m, n, k = (int(x) for x in sys.argv[1:4])
cfg = HgemmConfig.from_name(sys.argv[4])
a = torch.randn(m, k, device="cuda", dtype=torch.float16)
b = torch.randn(k, n, device="cuda", dtype=torch.float16)
for _ in range(2):
    hgemm(a, b, cfg)
    torch.matmul(a, b)
torch.cuda.synchronize()
