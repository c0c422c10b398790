"""Logs read back to be shown: only their tail. A candidate or task that prints without end
fills its log (1.5 GiB is easy); kforge reads the last ``TAIL_BYTES`` of it, never the whole."""

from __future__ import annotations

import os
from pathlib import Path

TAIL_BYTES = 64 * 1024


def tail_text(path: Path, max_bytes: int = TAIL_BYTES) -> str:
    """The last ``max_bytes`` of the file as text ("" when there is no file yet)."""
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - max_bytes))
            data = fh.read(max_bytes)
    except FileNotFoundError:
        return ""
    return data.decode(errors="replace")


def last_line(path: Path, max_chars: int = 1000) -> str:
    """The last non-empty line of the file's tail, its end at most ``max_chars`` ("" for none)."""
    lines = tail_text(path).strip().splitlines()
    return lines[-1][-max_chars:] if lines else ""
