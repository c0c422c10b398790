"""``kforge gemm``: search a tuned fp16 GEMM kernel per (M, N, K) shape, verify it, time it
against torch.matmul and cuBLASLt, and write the results CSV, a plot and the per-GPU
dispatch table that ``kforge.gemm.matmul`` reads.

The run itself is ``tools/gemm/pipeline.py`` (torch and triton only, so it runs on a bare GPU
box); this module reads the options, draws the plot and prints the summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .options import bad_input


def plot(rows: list[dict[str, str]], path: Path, gpu_name: str) -> None:
    """The tuned kernel's speedup over torch.matmul per shape, offline and server, by FLOPs."""
    import matplotlib

    from ...tools.gemm.report import ratios

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    flops = [2 * int(r["M"]) * int(r["N"]) * int(r["K"]) for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.scatter(flops, ratios(rows, "torch_ms", "kforge_ms"), s=14, label="offline (back to back)")
    ax.scatter(
        flops,
        ratios(rows, "torch_server_ms", "kforge_server_ms"),
        s=14,
        marker="x",
        label="server (idle gap, cold L2)",
    )
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("problem size, 2*M*N*K (FLOP)")
    ax.set_ylabel("speedup over torch.matmul")
    ax.set_title(f"kforge gemm, fp16 in / fp32 accumulate / fp16 out, {gpu_name}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _gpus(gpu: str, visible: int) -> list[int]:
    """The --gpu option's indices, each one of the ``visible`` GPUs."""
    try:
        gpus = [int(g) for g in gpu.split(",")]
    except ValueError:
        raise bad_input(f"--gpu {gpu!r}: give GPU indices like 0 or 0,1,2,3") from None
    if any(not 0 <= g < visible for g in gpus):
        raise bad_input(f"--gpu {gpu}: this machine has {visible} GPU(s)")
    return gpus


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

        from ...tools.gemm import pipeline
        from ...tools.gemm.report import summary
        from ...tools.output import output_folder

        if not torch.cuda.is_available():
            raise bad_input("kforge gemm needs a CUDA GPU (none is visible)")
        gpus = _gpus(gpu, torch.cuda.device_count())
        out = resume if resume is not None else out
        if resume is not None and not resume.is_dir():
            raise bad_input(f"--resume {resume}: no such run folder")
        output_folder(out)  # a folder kforge makes is git-ignored
        try:
            shapes = pipeline.read_shapes(shapes_csv, every, offset)
            if len(gpus) > 1:
                pipeline.spawn_workers(shapes_csv, gpus, out, every, offset, trials, prior)
            else:
                pipeline.read_prior(prior)  # a bad path fails here, before any GPU work
                pipeline.run_worker(shapes, gpus[0], out, trials, prior)
        except pipeline.GemmInputError as exc:
            raise bad_input(str(exc)) from None
        gpu_name = torch.cuda.get_device_name(gpus[0])
        rows = pipeline.finish(out, gpu_name)
        plot(rows, out / "speedup.png", gpu_name)
        typer.echo(summary(rows))
