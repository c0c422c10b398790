"""Who runs a batch folder: ``batch.lock`` names the live processes that own it (the batch
process and its local workers, each by pid and start time), so that a second ``kforge batch``
on the same folder, a resume included, refuses while any of them lives. A batch killed with
-9 leaves the lock behind; so does a worker that outlived it and still evaluates its task.
A lock whose processes are all gone is stale and taken over.

Taking the lock is serialised by ``flock`` on a guard file, and the lock file itself is
created with ``O_EXCL``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

from .tasks import BatchInputError

LOCK = "batch.lock"
GUARD = ".batch.lock.guard"


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat after the command name: state first, start time at index 19 ([] off Linux)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return []


def start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), "" where unknown: with the
    pid it names one process, so a pid used again after a reboot is not taken for the owner."""
    fields = _stat(pid)
    return fields[19] if len(fields) > 19 else ""


def alive(pid: int, started: str) -> bool:
    """Whether the process that ``pid`` and ``started`` name still runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's process
        pass
    fields = _stat(pid)
    if not fields:
        return True
    return fields[0] not in ("Z", "X") and not (started and len(fields) > 19 and fields[19] != started)


@contextlib.contextmanager
def _guard(out: Path) -> Iterator[None]:
    with (out / GUARD).open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


Owner = tuple[int, str]  # pid, start time


def _owners(path: Path) -> list[Owner]:
    try:
        listed = json.loads(path.read_text()).get("owners", [])
    except (OSError, ValueError, AttributeError):  # no lock, or a half-written one: no owner
        return []
    return [
        (o["pid"], str(o.get("start", "")))
        for o in listed
        if isinstance(o, dict) and isinstance(o.get("pid"), int)
    ]


def _write(path: Path, owners: list[Owner], *, create: bool) -> None:
    text = json.dumps({"owners": [{"pid": pid, "start": start} for pid, start in owners]})
    if create:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        return
    fresh = path.with_name(path.name + ".tmp")
    fresh.write_text(text)
    os.replace(fresh, path)


def _others(path: Path) -> list[Owner]:
    """The owners named in the lock that are still alive, this process left out."""
    return [(pid, start) for pid, start in _owners(path) if pid != os.getpid() and alive(pid, start)]


def check_free(out: Path) -> None:
    """A BatchInputError (one line) naming a live owner of the folder, if it has one."""
    live = _others(out / LOCK)
    if live:
        pid = live[0][0]
        raise BatchInputError(
            f"{out} is being run by process {pid} (named in {out / LOCK}): wait for it to end, or stop"
            f" it (kill {pid}) and resume"
        )


def take(out: Path) -> None:
    """Own the batch folder, or a BatchInputError (one line) naming a live owner."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK
    with _guard(out):
        check_free(out)
        path.unlink(missing_ok=True)  # stale: its owners are gone
        _write(path, [(os.getpid(), start_time(os.getpid()))], create=True)


def add_owners(out: Path, pids: list[int]) -> None:
    """Name more processes as owners (the local workers): a resume waits for them too."""
    path = out / LOCK
    with _guard(out):
        _write(path, _owners(path) + [(pid, start_time(pid)) for pid in pids], create=False)


def release(out: Path) -> None:
    """Drop this process from the lock; the lock goes once no owner named in it lives."""
    path = out / LOCK
    with _guard(out):
        live = _others(path)
        if live:
            _write(path, live, create=False)
        else:
            path.unlink(missing_ok=True)


@contextlib.contextmanager
def owning(out: Path) -> Iterator[None]:
    take(out)
    try:
        yield
    finally:
        release(out)
