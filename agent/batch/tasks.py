"""Which task files a batch runs: a KernelBench checkout (its ``KernelBench/levelN`` folders),
a folder of task files, a single task file, or a text file listing task paths.

A task's id is its name ("level1/23_Softmax", or the file's stem); task files of the same name
in different folders each get the short hash of their source after it ("scale_relu@1f2e3d4c"),
so both run; the same file listed twice runs once."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections import Counter
from pathlib import Path

BATCH_META = "batch.json"  # the batch's settings and selection, in its folder (resume reads it)
LEVEL_DIR = re.compile(r"^level(\d+)$")
LEADING_ID = re.compile(r"^(\d+)_")


class BatchInputError(ValueError):
    """Bad batch input (no such path, nothing selected). The message is one line."""


@dataclasses.dataclass(frozen=True)
class TaskEntry:
    key: str  # unique in the batch: "level1/23_Softmax", the file's stem, or either with "@<source hash>"
    path: Path
    level: int | None

    @property
    def problem_id(self) -> int | None:
        match = LEADING_ID.match(self.path.stem)
        return int(match.group(1)) if match else None

    @property
    def folder_name(self) -> str:
        return self.key.replace("/", "__")


def _sort_key(path: Path) -> tuple[int, str]:
    match = LEADING_ID.match(path.stem)
    return (int(match.group(1)) if match else 1 << 30, path.stem)


def _level_dirs(root: Path) -> dict[int, Path]:
    for base in (root / "KernelBench", root):
        found = {
            int(m.group(1)): d
            for d in (base.iterdir() if base.is_dir() else [])
            if d.is_dir() and (m := LEVEL_DIR.match(d.name))
        }
        if found:
            return found
    match = LEVEL_DIR.match(root.name)
    return {int(match.group(1)): root} if match and root.is_dir() else {}


def _folder(folder: Path, level: int | None) -> list[TaskEntry]:
    files = sorted((p for p in folder.glob("*.py") if not p.name.startswith("_")), key=_sort_key)
    prefix = f"level{level}/" if level is not None else ""
    return [TaskEntry(prefix + p.stem, p.resolve(), level) for p in files]


def _listing(path: Path) -> list[TaskEntry]:
    try:
        text = path.read_text()
    except UnicodeDecodeError as err:
        raise BatchInputError(
            f"{path}: not UTF-8 text (byte {err.start}); a list file names one task a line"
        ) from None
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if "\x00" in line:
            raise BatchInputError(f"{path}, line {number}: a NUL byte in a task path")
        task = Path(line) if Path(line).is_absolute() else path.parent / line
        level = LEVEL_DIR.match(task.parent.name)
        lvl = int(level.group(1)) if level else None
        entries.append(
            TaskEntry((f"level{lvl}/" if lvl is not None else "") + task.stem, task.resolve(), lvl)
        )
    return entries


def expand(path: Path, levels: list[int] | None) -> list[TaskEntry]:
    if not path.exists():
        raise BatchInputError(f"{path}: no such file or folder")
    if path.is_file():
        if path.suffix == ".py":
            return [TaskEntry(path.stem, path.resolve(), None)]
        return _listing(path)
    by_level = _level_dirs(path)
    if by_level:
        chosen = sorted(by_level) if levels is None else [lv for lv in levels if lv in by_level]
        return [e for lv in chosen for e in _folder(by_level[lv], lv)]
    return _folder(path, None)


def source_digest(path: Path) -> str:
    """A short hash of the file's bytes (of its path when it cannot be read)."""
    try:
        with path.open("rb") as fh:
            return hashlib.file_digest(fh, "sha256").hexdigest()[:8]
    except OSError:
        return hashlib.sha256(str(path).encode()).hexdigest()[:8]


def unique_ids(entries: list[TaskEntry], notes: list[str]) -> list[TaskEntry]:
    """The entries with ids unique in the batch: a name that several files share gets each
    file's source hash. A file listed twice (or a copy of it under the same name) runs once;
    ``notes`` gets a line for every id changed and every copy left out."""
    first: dict[Path, TaskEntry] = {}  # the first entry of each file
    for entry in entries:
        first.setdefault(entry.path, entry)
    by_path = list(first.values())
    shared = Counter(e.key for e in by_path)
    kept: dict[str, TaskEntry] = {}
    for entry in by_path:
        if shared[entry.key] > 1:
            entry = dataclasses.replace(entry, key=f"{entry.key}@{source_digest(entry.path)}")
        if entry.key in kept:
            notes.append(f"{entry.path} is a copy of {kept[entry.key].path}: it runs once, as {entry.key}")
            continue
        kept[entry.key] = entry
    for name, count in shared.items():
        if count > 1:
            ids = [e.key for e in kept.values() if e.key.rsplit("@", 1)[0] == name]
            notes.append(f"{count} task files are named {name}: they run as {', '.join(ids)}")
    return list(kept.values())


def select(
    paths: list[Path],
    levels: list[int] | None,
    task_ids: list[int] | None,
    limit: int | None,
    notes: list[str] | None = None,
) -> list[TaskEntry]:
    """The batch's tasks in order: filtered by level and problem id, then at most ``limit``
    per level (tasks without a level form one group), in file order (never by results).
    Ids are made unique (``unique_ids``); what that changed is added to ``notes``."""
    entries: list[TaskEntry] = []
    for path in paths:
        entries += expand(path, levels)
    if levels is not None:
        if entries and all(e.level is None for e in entries):
            raise BatchInputError(
                f"--level {','.join(map(str, levels))}: no KernelBench level folders (level1, ...) under the "
                "given paths; drop --level, or point at a KernelBench checkout"
            )
        entries = [e for e in entries if e.level is None or e.level in levels]
    if task_ids is not None:
        entries = [e for e in entries if e.problem_id in task_ids]
    if limit is not None:
        taken: dict[int | None, int] = {}
        kept = []
        for e in entries:
            if taken.get(e.level, 0) < limit:
                kept.append(e)
                taken[e.level] = taken.get(e.level, 0) + 1
        entries = kept
    unique = unique_ids(entries, notes if notes is not None else [])
    if not unique:
        raise BatchInputError("no task files selected (check the paths, --level and --tasks)")
    return unique


def parse_ints(text: str | None, what: str) -> list[int] | None:
    if text is None or not text.strip():
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise BatchInputError(f"{what} must be comma-separated integers, got {text!r}") from None
