"""``kforge gemm``: search a tuned fp16 GEMM kernel per (M, N, K) shape, verify it, time it
against torch.matmul and cuBLASLt, and write the results CSV, a plot and the per-GPU
dispatch table that ``kforge.gemm.matmul`` reads.

Imports only kforge.tools (torch, triton), so it runs on a bare GPU box. Several GPUs: one
worker process per GPU, each on every n-th shape; a killed run resumes from its CSVs.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .eval import bad_input

if TYPE_CHECKING:  # torch and triton are imported by the command, not by `kforge --help`
    from ...tools.gemm.config import HgemmConfig


def fields() -> list[str]:
    """The results CSV's columns."""
    from ...tools.gemm.search import ShapeResult

    return [f.name for f in dataclasses.fields(ShapeResult)]


def read_shapes(path: Path, every: int, offset: int) -> list[tuple[int, int, int]]:
    """The CSV's (M, N, K) rows ordered by M*N*K (then M, N, K); every ``every``-th from
    ``offset``: the selection rule is fixed by these two numbers."""
    if not path.is_file():
        raise bad_input(f"{path}: no such shapes CSV (columns M,N,K)")
    with path.open() as f:
        rows = list(csv.DictReader(f))
    if not rows or not {"M", "N", "K"} <= set(rows[0]):
        raise bad_input(f"{path}: needs a header with columns M, N, K")
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
        raise bad_input(f"--prior {path}: no such results CSV (a kforge gemm run's results.csv)")
    from ...tools.gemm.config import HgemmConfig

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

    from ...tools.gemm.search import measure_shape, search_shape

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
    """One ``kforge gemm`` process per GPU; fails if any of them fails."""
    procs = []
    for i, gpu in enumerate(gpus):
        cmd = [
            sys.executable,
            "-c",
            "from kforge.agent.cli import main; main()",  # agent/cli.py has no __main__ block
            "gemm",
            str(csv_path),
            "--gpu",
            str(gpu),
            "--out",
            str(out),
        ]
        cmd += [
            "--every",
            str(every * len(gpus)),
            "--offset",
            str(offset + i * every),
            "--trials",
            str(trials),
        ]
        cmd += ["--prior", str(prior)] if prior is not None else []
        procs.append(subprocess.Popen(cmd, env={**os.environ, "KFORGE_GEMM_WORKER": "1"}))
    failed = [gpu for gpu, proc in zip(gpus, procs, strict=True) if proc.wait() != 0]
    if failed:
        raise bad_input(f"the workers on GPU(s) {failed} failed; rerun with --resume {out} to continue")


def finish(out: Path, gpu_name: str) -> None:
    """Merged results CSV, the dispatch table (shapes where the kernel beat torch.matmul
    offline), the plot, each shape as a task with its kernel as a candidate, and a summary."""
    from ...tools.gemm.config import HgemmConfig
    from ...tools.gemm.dispatch import save_table, table_path
    from ...tools.gemm.report import plot, summary, table_configs
    from ...tools.gemm.tasks import write_tasks

    rows = read_results(out)
    with (out / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields())
        writer.writeheader()
        writer.writerows(sorted(rows, key=lambda r: math.prod(int(r[c]) for c in "MNK")))
    save_table(table_path(gpu_name, out), gpu_name, table_configs(rows))
    plot(rows, out / "speedup.png", gpu_name)
    write_tasks(
        {(int(r["M"]), int(r["N"]), int(r["K"])): HgemmConfig.from_name(r["config"]) for r in rows},
        out / "tasks",
    )
    typer.echo(summary(rows))


def register(app: typer.Typer) -> None:
    @app.command("gemm")
    def gemm_command(
        shapes_csv: Annotated[Path, typer.Argument(metavar="SHAPES.csv", help="CSV with columns M,N,K")],
        gpu: Annotated[str, typer.Option(help="GPU indices, comma-separated (one worker each)")] = "0",
        out: Annotated[Path, typer.Option(help="output folder")] = Path("gemm-out"),
        resume: Annotated[Path | None, typer.Option(help="continue the run in this folder")] = None,
        every: Annotated[int, typer.Option(min=1, help="take every n-th shape by M*N*K")] = 1,
        offset: Annotated[int, typer.Option(min=0, help="index of the first shape taken")] = 0,
        trials: Annotated[int, typer.Option(min=3, help="server-mode timed calls per kernel")] = 30,
        prior: Annotated[
            Path | None,
            typer.Option(
                help="an earlier run's results.csv: of the 64+-row tile family, try only its winner"
            ),
        ] = None,
    ) -> None:
        """Tune an fp16 GEMM kernel per shape and measure it against torch.matmul and cuBLASLt."""
        import torch

        if not torch.cuda.is_available():
            raise bad_input("kforge gemm needs a CUDA GPU (none is visible)")
        try:
            gpus = [int(g) for g in gpu.split(",")]
        except ValueError:
            raise bad_input(f"--gpu {gpu!r}: give GPU indices like 0 or 0,1,2,3") from None
        if any(not 0 <= g < torch.cuda.device_count() for g in gpus):
            raise bad_input(f"--gpu {gpu}: this machine has {torch.cuda.device_count()} GPU(s)")
        out = resume if resume is not None else out
        if resume is not None and not resume.is_dir():
            raise bad_input(f"--resume {resume}: no such run folder")
        out.mkdir(parents=True, exist_ok=True)
        shapes = read_shapes(shapes_csv, every, offset)
        if len(gpus) > 1:
            spawn_workers(shapes_csv, gpus, out, every, offset, trials, prior)
        else:
            read_prior(prior)  # a bad path fails here, before any GPU work
            run_worker(shapes, gpus[0], out, trials, prior)
        if os.environ.get("KFORGE_GEMM_WORKER") != "1":
            finish(out, torch.cuda.get_device_name(gpus[0]))
