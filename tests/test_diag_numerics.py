"""bench/diag_numerics.py, the GPU diagnosis of a torch.compile answer the strict check refuses
(EfficientViT's, unseen9), runs on the CPU: eager and compile against float64, the verifier's
weights and comparisons, a row a seed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_the_diagnosis_reports_eager_and_compile_against_float64_per_seed() -> None:
    task = ROOT / "tests" / "fixtures" / "tasks" / "scale_relu.py"
    done = subprocess.run(
        [sys.executable, "diag_numerics.py", str(task), "--device", "cpu", "--seeds", "2"],
        cwd=ROOT / "bench", capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "TF32 off (matmul False, cuDNN False)" in done.stdout  # cuDNN's default is True
    rows = [line for line in done.stdout.splitlines() if "│ default" in line]
    assert len(rows) == 2 and all("passes" in row for row in rows), done.stdout
