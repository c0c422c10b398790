"""The ``kforge`` command line. Each command group lives in ``agent/commands/``."""

from __future__ import annotations

import importlib
import logging

import typer

app = typer.Typer(
    name="kforge",
    help="Make PyTorch code faster on your GPU: write, verify and measure faster kernels.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Each module defines register(app). A module missing its optional dependencies
# still registers its commands; they fail with a message when run.
COMMAND_MODULES = ("eval", "retrieval", "optimize", "batch", "train")


def _register_all() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"{__package__}.commands.{name}")
        except ModuleNotFoundError as err:
            if err.name and err.name.startswith(f"{__package__}.commands"):
                continue  # that command group is not built yet
            raise
        module.register(app)


_register_all()


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app()
