"""``kforge gemm``'s room: the per-shape tuned fp16 GEMM.

``config`` names a kernel configuration; ``kernels`` (Triton), ``tma`` (its TMA schedules) and
``cuda`` (CUDA C++) run one; ``cublaslt`` calls cuBLASLt's algorithms for comparison; ``search``
finds and measures each shape's best; ``pipeline`` runs the search over a shapes CSV on one or
more GPUs and ``report`` and ``tasks`` write what it found; ``dispatch`` reads the per-GPU
table in ``tables/`` for ``kforge.gemm.matmul``. ``tf32x3`` is the fp32 GEMM at fp32 accuracy on
tensor cores (3xTF32, operands split before it) that the ``tf32x3-gemm`` candidates call.
"""
