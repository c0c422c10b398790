"""What the commands share: the options that ``optimize``, ``chat`` and ``batch`` all take (one
declaration, one default, shown in ``--help``), and the checks and one-line errors for bad input.
Parsing only: nothing here runs anything."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from ...tools.precision import PRECISIONS
from ..settings import DEFAULT_OUT, RunSettings

_D = RunSettings(device="cpu")  # the defaults a flag left out falls back to (device: detected)


def bad_input(message: str) -> typer.Exit:
    """Print ``error: message`` on stderr; the exit (code 2) for the caller to raise."""
    Console(stderr=True).print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def resolve_device(device: str | None) -> str:
    """The device to use: as asked, or cuda when one is visible; a clear error otherwise."""
    import torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cuda", "cpu"):
        raise bad_input(f"unknown device {device!r}: use --device cuda or --device cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise bad_input("no CUDA GPU is visible: use --device cpu to verify on the CPU")
    return device


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise bad_input(f"unknown precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    return precision


# Options of optimize, chat and batch. None means "not given": a resumed run keeps its own, then
# the config file, then the default in the help.
Device = Annotated[str | None, typer.Option(help="cuda or cpu (default: cuda when one is visible)")]
Precision = Annotated[
    str | None, typer.Option(help=f"fp32 (strict), tf32, bf16 or fp16 (default: {_D.precision})")
]
Rounds = Annotated[int | None, typer.Option(min=1, help=f"rounds at most (default: {_D.rounds})")]
Candidates = Annotated[
    int | None,
    typer.Option(min=1, help=f"candidates per round, evaluated together (default: {_D.candidates})"),
]
TimingTrials = Annotated[
    int | None, typer.Option(min=1, help="timed runs per callable (default: 100 on a GPU, 5 on the CPU)")
]
Model = Annotated[str | None, typer.Option(help="model name at the endpoint (or KFORGE_MODEL)")]
BaseUrl = Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint (or OPENAI_BASE_URL)")]
ApiKey = Annotated[str | None, typer.Option(help="API key (or OPENAI_API_KEY)")]
Retrieval = Annotated[
    bool | None,
    typer.Option("--retrieval/--no-retrieval", help="retrieve docs and kernels (default: on when installed)"),
]
Out = Annotated[Path | None, typer.Option(help=f"folder the run folders go in (default: {DEFAULT_OUT})")]
Config = Annotated[
    Path | None,
    typer.Option(help="TOML config of settings (docs/config.md) (default: ~/.config/kforge/config.toml)"),
]
