"""The path policy: every file the server reads or writes for a caller lies under its root.

Every path a caller gives, and every task path a batch would run (those read from list files
and found in folders included), is resolved (symlinks followed) and checked against the root.
A path with a NUL byte, a file that is not UTF-8 text and source text that cannot be written
get a one-line ToolError, as every other bad argument does.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError

from ..batch import BatchInputError, TaskEntry, select

LIST_BREAKERS = ("\n", "\r", "#")  # a task path with one of these cannot be a list file's line
MAX_SOURCE_BYTES = 16 * 2**20  # a task or candidate file larger than this is refused unread


def shown(given: str) -> str:
    """A caller's string as one printable line."""
    return given if given.isprintable() else repr(given)


@dataclasses.dataclass(frozen=True)
class Workspace:
    root: Path  # resolved; paths given by the client resolve inside it or are refused
    out: Path  # run and batch folders, and sources given as text
    device: str  # "cuda" or "cpu", for every evaluation and run

    def inside(self, path: Path, given: str) -> Path:
        """``path`` resolved (symlinks followed), or a ToolError when that is outside the root."""
        resolved = path.resolve()
        if not resolved.is_relative_to(self.root):
            raise ToolError(f"{shown(given)}: outside the workspace {self.root}; give a path inside it")
        return resolved

    def path(self, given: str, *, what: str = "file") -> Path:
        """``given`` (relative to the root, or absolute) resolved inside the root, or a ToolError."""
        if not given.strip():
            raise ToolError(f"empty {what} path: give a path inside {self.root}")
        if "\x00" in given:
            raise ToolError(f"{shown(given)}: a NUL byte in a {what} path")
        return self.inside(self.root / given, given)

    def existing_file(self, given: str, *, what: str = "file") -> Path:
        path = self.path(given, what=what)
        if not path.is_file():
            raise ToolError(f"{shown(given)}: no such {what} in the workspace {self.root}")
        if path.stat().st_size > MAX_SOURCE_BYTES:
            raise ToolError(f"{shown(given)}: the {what} is over {MAX_SOURCE_BYTES // 2**20} MiB")
        try:
            path.read_bytes().decode()
        except UnicodeDecodeError as err:
            raise ToolError(f"{shown(given)}: the {what} is not UTF-8 text (byte {err.start})") from None
        except OSError as err:
            raise ToolError(f"{shown(given)}: the {what} cannot be read ({err.strerror})") from None
        return path

    def source_file(self, path_or_source: str, *, what: str) -> Path:
        """A task or candidate given as a workspace path or as Python source; source text is
        written once under ``out/inputs`` (named by its hash) so the engine gets a file."""
        if "\n" not in path_or_source and path_or_source.strip().endswith(".py"):
            return self.existing_file(path_or_source.strip(), what=what)
        if "\n" not in path_or_source:
            raise ToolError(f"{what} must be a .py path in the workspace or Python source text")
        if "\x00" in path_or_source:
            raise ToolError(f"the {what} source holds a NUL byte: not Python source")
        try:
            data = path_or_source.encode()
        except UnicodeEncodeError as err:
            raise ToolError(f"the {what} source is not valid Unicode text (at {err.start})") from None
        path = self.out / "inputs" / f"{what}_{hashlib.sha256(data).hexdigest()[:10]}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    def batch_tasks(self, given: list[str], limit: int | None) -> tuple[list[TaskEntry], list[str]]:
        """The task files a batch over ``given`` (files, folders, list files, a KernelBench
        checkout) would run, each inside the root, with the notes on their ids; or a ToolError."""
        starts = [self.path(p, what="task") for p in given]
        for text, start in zip(given, starts, strict=True):
            if not start.exists():
                raise ToolError(f"{shown(text)}: no such file or folder in the workspace {self.root}")
        notes: list[str] = []
        try:
            entries = select(starts, None, None, limit, notes)
        except BatchInputError as err:
            raise ToolError(str(err)) from None
        for entry in entries:
            where = f"{entry.path} (selected from {', '.join(map(shown, given))})"
            self.inside(entry.path, where)
            if any(c in str(entry.path) for c in LIST_BREAKERS):
                raise ToolError(f"{shown(str(entry.path))}: a task path with a line break or # cannot be run")
        return entries, notes
