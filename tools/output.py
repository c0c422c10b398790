"""Folders kforge makes for its output (run, batch and GEMM folders) keep out of the user's
git and linters: each gets a ``.gitignore`` of ``*`` when kforge creates it, as virtual
environments and pytest's cache do. Ruff, black and most tools honour it. A folder that
already existed is the user's and is left as it is; a folder inside one that kforge already
ignores needs no second file."""

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
    if top is not None and not _ignored_by_kforge(top.parent):
        (top / ".gitignore").write_text(IGNORE_ALL)
    return path


def _ignored_by_kforge(folder: Path) -> bool:
    """Whether ``folder`` or one above it holds the ``.gitignore`` that kforge writes."""
    for above in (folder, *folder.parents):
        try:
            if (above / ".gitignore").read_text() == IGNORE_ALL:
                return True
        except OSError:
            continue
    return False
