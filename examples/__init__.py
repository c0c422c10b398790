"""Example tasks in KernelBench format and their reference candidates, listed in catalog.json."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).parent


def catalog_pairs() -> list[tuple[Path, Path]]:
    """(task file, candidate file) for every reference candidate in catalog.json."""
    catalog = json.loads((ROOT / "catalog.json").read_text())
    return [(ROOT / e["task_file"], ROOT / c["file"]) for e in catalog for c in e["candidates"]]
