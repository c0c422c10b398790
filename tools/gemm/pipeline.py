"""``kforge gemm``'s run: read the shapes CSV, search and measure each shape on one GPU (or
spawn one worker process per GPU, each on every n-th shape), and finish with the merged
results CSV, the per-GPU dispatch table and each shape as a task. A killed run resumes from
its per-GPU CSVs. Torch, triton and the stdlib only: it runs on a bare GPU box.

A spawned worker is ``python -m kforge.tools.gemm.pipeline SHAPES.csv GPU OUT EVERY OFFSET
TRIALS [PRIOR]``.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import subprocess
import sys
from pathlib import Path

from .config import HgemmConfig


class GemmInputError(Exception):
    """A shapes CSV, prior results CSV or worker that the run cannot go on with."""


def fields() -> list[str]:
    """The results CSV's columns."""
    from .search import ShapeResult

    return [f.name for f in dataclasses.fields(ShapeResult)]


def read_shapes(path: Path, every: int, offset: int) -> list[tuple[int, int, int]]:
    """The CSV's (M, N, K) rows ordered by M*N*K (then M, N, K); every ``every``-th from
    ``offset``: the selection rule is fixed by these two numbers."""
    if not path.is_file():
        raise GemmInputError(f"{path}: no such shapes CSV (columns M,N,K)")
    with path.open() as f:
        rows = list(csv.DictReader(f))
    if not rows or not {"M", "N", "K"} <= set(rows[0]):
        raise GemmInputError(f"{path}: needs a header with columns M, N, K")
    shapes = sorted({(int(r["M"]), int(r["N"]), int(r["K"])) for r in rows}, key=lambda s: (math.prod(s), s))
    return shapes[offset::every]


def read_results(out: Path) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for part in sorted(out.glob("results-gpu*.csv")):
        with part.open() as f:
            rows.extend(csv.DictReader(f))
    return rows


def read_prior(path: Path | None) -> dict[tuple[int, int, int], HgemmConfig]:
    """An earlier run's winner per shape (its results.csv), or nothing."""
    if path is None:
        return {}
    if not path.is_file():
        raise GemmInputError(f"--prior {path}: no such results CSV (a kforge gemm run's results.csv)")
    with path.open() as f:
        return {
            (int(r["M"]), int(r["N"]), int(r["K"])): HgemmConfig.from_name(r["config"])
            for r in csv.DictReader(f)
        }


def run_worker(
    shapes: list[tuple[int, int, int]], gpu: int, out: Path, trials: int, prior: Path | None = None
) -> None:
    """Search and measure each shape not yet in this GPU's CSV, appending one row each."""
    import torch

    from .search import measure_shape, search_shape

    device = torch.device("cuda", gpu)
    torch.cuda.set_device(device)
    part = out / f"results-gpu{gpu}.csv"
    done = {(int(r["M"]), int(r["N"]), int(r["K"])) for r in read_results(out)}
    priors = read_prior(prior)
    new_file = not part.exists()
    with part.open("a", newline="") as f, (out / f"search-gpu{gpu}.log").open("a") as log_file:
        writer = csv.DictWriter(f, fieldnames=fields())
        if new_file:
            writer.writeheader()
        for m, n, k in shapes:
            if (m, n, k) in done:
                continue
            log: list[str] = []
            cfg, tried = search_shape(m, n, k, device, log, priors.get((m, n, k)))
            result = dataclasses.replace(
                measure_shape(m, n, k, cfg, device, trials, seed=m + n + k), candidates=tried
            )
            writer.writerow(dataclasses.asdict(result))
            f.flush()
            log_file.write("".join(line + "\n" for line in log))
            print(
                f"{m}x{n}x{k} {cfg.name}: {result.speedup:.3f}x offline, {result.server_speedup:.3f}x server",
                flush=True,
            )
            torch.cuda.empty_cache()


def spawn_workers(
    csv_path: Path, gpus: list[int], out: Path, every: int, offset: int, trials: int, prior: Path | None
) -> None:
    """One worker process per GPU, each on every ``every * len(gpus)``-th shape; fails if any
    of them fails."""
    procs = []
    for i, gpu in enumerate(gpus):
        cmd = [sys.executable, "-m", "kforge.tools.gemm.pipeline", str(csv_path), str(gpu), str(out)]
        cmd += [str(every * len(gpus)), str(offset + i * every), str(trials)]
        cmd += [str(prior)] if prior is not None else []
        procs.append(subprocess.Popen(cmd))
    failed = [gpu for gpu, proc in zip(gpus, procs, strict=True) if proc.wait() != 0]
    if failed:
        raise GemmInputError(f"the workers on GPU(s) {failed} failed; rerun with --resume {out} to continue")


def finish(out: Path, gpu_name: str) -> list[dict[str, str]]:
    """Merged results CSV, the dispatch table (shapes where the kernel beat torch.matmul
    offline) and each shape as a task with its kernel as a candidate; the merged rows."""
    from .dispatch import save_table, table_path
    from .report import table_configs
    from .tasks import write_tasks

    rows = read_results(out)
    with (out / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields())
        writer.writeheader()
        writer.writerows(sorted(rows, key=lambda r: math.prod(int(r[c]) for c in "MNK")))
    save_table(table_path(gpu_name, out), gpu_name, table_configs(rows))
    write_tasks(
        {(int(r["M"]), int(r["N"]), int(r["K"])): HgemmConfig.from_name(r["config"]) for r in rows},
        out / "tasks",
    )
    return rows


def main(argv: list[str]) -> None:
    """A worker that :func:`spawn_workers` started: SHAPES.csv GPU OUT EVERY OFFSET TRIALS [PRIOR]."""
    csv_path, gpu, out, every, offset, trials, *prior = argv
    shapes = read_shapes(Path(csv_path), int(every), int(offset))
    run_worker(shapes, int(gpu), Path(out), int(trials), Path(prior[0]) if prior else None)


if __name__ == "__main__":
    main(sys.argv[1:])
