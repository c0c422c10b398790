"""The path policy: every file the server reads or writes for a caller lies under its root."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError


@dataclasses.dataclass(frozen=True)
class Workspace:
    root: Path  # resolved; paths given by the client resolve inside it or are refused
    out: Path  # run and batch folders, and sources given as text
    device: str  # "cuda" or "cpu", for every evaluation and run

    def path(self, given: str, *, what: str = "file") -> Path:
        """``given`` (relative to the root, or absolute) resolved inside the root, or a ToolError."""
        if not given.strip():
            raise ToolError(f"empty {what} path: give a path inside {self.root}")
        path = (self.root / given).resolve()
        if not path.is_relative_to(self.root):
            raise ToolError(f"{given}: outside the workspace {self.root}; give a path inside it")
        return path

    def existing_file(self, given: str, *, what: str = "file") -> Path:
        path = self.path(given, what=what)
        if not path.is_file():
            raise ToolError(f"{given}: no such {what} in the workspace {self.root}")
        return path

    def source_file(self, path_or_source: str, *, what: str) -> Path:
        """A task or candidate given as a workspace path or as Python source; source text is
        written once under ``out/inputs`` (named by its hash) so the engine gets a file."""
        if "\n" not in path_or_source and path_or_source.strip().endswith(".py"):
            return self.existing_file(path_or_source.strip(), what=what)
        if "\n" not in path_or_source:
            raise ToolError(f"{what} must be a .py path in the workspace or Python source text")
        digest = hashlib.sha256(path_or_source.encode()).hexdigest()[:10]
        path = self.out / "inputs" / f"{what}_{digest}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(path_or_source)
        return path
