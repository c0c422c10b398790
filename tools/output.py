"""Folders kforge makes for its output (run, batch and GEMM folders) keep out of the user's
git and linters: each gets a ``.gitignore`` of ``*`` when kforge creates it, as virtual
environments and pytest's cache do. Ruff, black and most tools honour it. A folder that
already existed is the user's and is left as it is."""

from __future__ import annotations

from pathlib import Path

IGNORE_ALL = "# made by kforge: run output, kept out of git and linters (delete this file to track it)\n*\n"


def output_folder(path: Path) -> Path:
    """Create ``path`` (and its parents) for kforge's output; the topmost folder it creates holds
    the ``.gitignore``. Returns ``path``."""
    path = Path(path)
    top = None
    for folder in (path, *path.parents):
        if folder.is_dir():
            break
        top = folder
    path.mkdir(parents=True, exist_ok=True)
    if top is not None:
        (top / ".gitignore").write_text(IGNORE_ALL)
    return path
