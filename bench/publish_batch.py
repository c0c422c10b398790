"""Copy a batch folder's results into docs/data without local paths or per-run details: the
batch.json and results.jsonl that bench_kernelbench.py reads, nothing else (no run folders,
no task sources: KernelBench stays the user's copy).

    python bench/publish_batch.py .carry/kb/kb-h200-fp32-v3 docs/data/kb-h200-fp32-v3 \
        [--selection "KernelBench (the user's copy; levels 1-3)"]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# Local paths, the baseline's raw timings, and search-step details the confirmed result replaces.
DROPPED = ("path", "run_dir", "baseline", "best_attempt_id", "best_path", "reason", "search_result")


def publish(src: Path, dst: Path, selection: str) -> int:
    batch = json.loads((src / "batch.json").read_text())
    batch["selection"]["paths"] = [selection]
    lines = [json.loads(t) for t in (src / "results.jsonl").read_text().splitlines() if t.strip()]
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "batch.json").write_text(json.dumps(batch) + "\n")
    rows = ({k: v for k, v in line.items() if k not in DROPPED} for line in lines)
    (dst / "results.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return len(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("src", type=Path, help="batch folder (with batch.json and results.jsonl)")
    parser.add_argument("dst", type=Path)
    parser.add_argument("--selection", default="KernelBench (the user's copy; levels 1-3)")
    args = parser.parse_args()
    if not (args.src / "batch.json").is_file():
        raise SystemExit(f"{args.src}: no batch.json here; give the folder kforge batch --out wrote")
    print(f"{publish(args.src, args.dst, args.selection)} results -> {args.dst}")


if __name__ == "__main__":
    main()
