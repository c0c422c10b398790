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


def _hide_flag_types() -> None:
    """Typer (0.28+) prints a ``<bool>`` type beside every on/off flag; a flag takes no value."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None:
        return

    def display_type_rich(self: TyperOption, ctx: object) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_hide_flag_types()

# Each module defines register(app) and imports its heavy dependencies inside its
# commands. A group whose module still cannot be imported (an optional dependency
# missing, as on a bare GPU box) gets commands that say what to install.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "eval": ("eval", "hw"),
    "retrieval": ("index", "search"),
    "optimize": ("optimize",),
    "batch": ("batch",),
    "train": ("train",),
    "report": ("report",),
    "chat": ("chat",),
    "export": ("export",),
    "gemm": ("gemm",),
    "mcp": ("mcp",),
    "model": ("model",),
}


def _missing(command: str, package: str) -> None:
    @app.command(command, help=f"(unavailable: needs {package})")
    def unavailable() -> None:
        typer.echo(f"kforge {command} needs {package}: pip install 'kforge' with its dependencies", err=True)
        raise typer.Exit(2)


def _register_all() -> None:
    for module_name, commands in COMMAND_MODULES.items():
        try:
            module = importlib.import_module(f"{__package__}.commands.{module_name}")
        except ModuleNotFoundError as err:
            if err.name and err.name.startswith(f"{__package__}.commands.{module_name}"):
                continue  # that command group is not built yet
            if err.name and err.name.startswith("kforge"):
                raise
            for command in commands:
                _missing(command, err.name or "a missing package")
            continue
        module.register(app)


_register_all()


def _end_with_parent() -> None:
    """A command started by the MCP server (``KFORGE_PARENT_PID``) ends when the server does,
    however it ended (a killed IDE client takes the server, its runs and their workers)."""
    import os

    parent = os.environ.pop("KFORGE_PARENT_PID", "")
    if parent.isdigit():
        from ..tools.process import watch_parent

        watch_parent(int(parent))


def main() -> None:
    _end_with_parent()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app()
