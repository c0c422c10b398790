"""Retrieval benchmark: index time of the shipped corpus and of N synthetic kernel entries,
and query latency (p50, p95) at that size.

    python bench/bench_retrieval.py                 # 10,000 synthetic kernels, 200 queries
    python bench/bench_retrieval.py --synthetic 500 # a quick run
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from kforge.retrieval import Embedder, Store, retrieve_for_task
from kforge.retrieval.chunking import Chunk, chunk_document
from kforge.retrieval.corpus import corpus_chunks, load_documents
from kforge.retrieval.embed import load_model
from kforge.retrieval.kernels import KernelRecord, kernel_document
from kforge.tools.hardware import spec_for
from rich.console import Console
from rich.table import Table

OPS = [
    "softmax",
    "layernorm",
    "rmsnorm",
    "matmul",
    "conv2d",
    "gelu",
    "attention",
    "cross_entropy",
    "row_sum",
    "add",
]
IDEAS = [
    "one program per row",
    "shared-memory tiling",
    "warp shuffle reduction",
    "vectorized float4 loads",
    "fused epilogue",
    "online softmax",
    "Welford statistics",
    "split-K",
    "persistent grid",
    "tl.dot ieee",
]
QUERIES = [
    "warp shuffle reduction for a row softmax",
    "fused matmul bias relu epilogue",
    "H100 memory bandwidth",
    "shared memory bank conflicts padding",
    "Triton num_stages for matmul",
    "layernorm Welford kernel",
    "CUDA graph replay small tensors",
    "tensor cores wgmma on Hopper",
    "caching outputs is a cheat",
]


def synthetic_chunks(n: int, seed: int = 0) -> list[Chunk]:
    rng = random.Random(seed)
    chunks = []
    for i in range(n):
        op, backend = rng.choice(OPS), rng.choice(["cuda", "triton"])
        ideas = rng.sample(IDEAS, 3)
        source = f"# synthetic {op} kernel {i}\n" + "\n".join(
            f"def step_{j}(x_ptr, y_ptr, n, BLOCK: tl.constexpr):  # {rng.choice(IDEAS)}" for j in range(6)
        )
        speedup = round(rng.uniform(0.5, 4.0), 2)
        record = KernelRecord(
            name=f"synthetic_{i}",
            source=source,
            backend=backend,
            op=op,
            file=f"synthetic/{i}.py",
            summary=f"{op} in {backend} using {', '.join(ideas)}.",
            topics=tuple(ideas),
            measured={"status": "ok", "speedup_vs_eager": speedup},
            gpu="H100-SXM",
            arch="sm_90",
            measured_on="synthetic",
        )
        chunks.extend(chunk_document(kernel_document(record, f"kernel/synthetic_{i}", origin="corpus")))
    return chunks


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--store", type=Path, default=None, help="store folder [default: a temporary one]")
    args = parser.parse_args()
    root = args.store or Path(tempfile.mkdtemp(prefix="kforge-bench-"))
    rows: list[tuple[str, str]] = []

    start = time.perf_counter()
    embedder = Embedder()
    load_model(embedder.model_path)
    rows.append(("load embedding model", f"{time.perf_counter() - start:.1f} s"))

    shipped = corpus_chunks(load_documents())
    store = Store(root / "store", embedder)
    report = store.index(shipped)
    rows.append((f"index shipped corpus ({len(shipped)} chunks)", f"{report.seconds:.1f} s"))
    rows.append(("re-index unchanged corpus", f"{store.index(shipped).seconds:.2f} s"))

    synthetic = synthetic_chunks(args.synthetic)
    report = store.index([*shipped, *synthetic])
    per_chunk = 1e3 * report.seconds / max(1, report.embedded)
    rows.append(
        (f"index {args.synthetic:,} synthetic kernels", f"{report.seconds:.1f} s ({per_chunk:.1f} ms/chunk)")
    )

    rng = random.Random(1)
    latencies = []
    for _ in range(args.queries):
        t = time.perf_counter()
        store.search(rng.choice(QUERIES), k=5)
        latencies.append(1e3 * (time.perf_counter() - t))
    rows.append(
        (
            f"search k=5, {store.count():,} chunks: p50 / p95",
            f"{statistics.median(latencies):.1f} / {percentile(latencies, 0.95):.1f} ms",
        )
    )

    gpu = spec_for("H100-SXM")
    task = "class Model(nn.Module):\n    def forward(self, x):\n        return torch.softmax(x, dim=-1)\n"
    latencies = []
    for _ in range(max(1, args.queries // 4)):
        t = time.perf_counter()
        retrieve_for_task(task, ["softmax"], gpu, store=store)
        latencies.append(1e3 * (time.perf_counter() - t))
    rows.append(
        (
            "retrieve_for_task: p50 / p95",
            f"{statistics.median(latencies):.1f} / {percentile(latencies, 0.95):.1f} ms",
        )
    )

    table = Table(title=f"retrieval benchmark (store {root})")
    table.add_column("measurement")
    table.add_column("result", justify="right")
    for row in rows:
        table.add_row(*row)
    Console().print(table)
    print("\n| measurement | result |\n| --- | --- |\n" + "\n".join(f"| {a} | {b} |" for a, b in rows))


if __name__ == "__main__":
    main()
