"""What the candidate being evaluated is doing, shown while it runs: the judge appends each
phase it enters to a file in its folder (``runner.Job.phase``); the parent reads the new
lines and hands them on in the user's words ("loading", "verifying", "timing")."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from .result import Result, Status

# The judge's phases in the words the user sees; others are not shown.
SHOWN_PHASES = {"candidate import": "loading", "verify": "verifying", "timing": "timing"}


@contextlib.contextmanager
def phases_shown(path: Path, on_phase: Callable[[str], None] | None) -> Iterator[None]:
    """While the judge runs, hand each phase it appends to ``path`` to ``on_phase`` (in the
    user's words, repeats left out); what is left when the judge ends is handed on then."""
    if on_phase is None:
        yield
        return
    done, seen, last = threading.Event(), [0], [""]

    def read() -> None:
        try:
            lines = path.read_text().split("\n")[:-1]  # whole lines: one being written waits
        except OSError:
            return
        for line in lines[seen[0] :]:
            shown = SHOWN_PHASES.get(line.split(":")[0], "")
            if shown and shown != last[0]:
                last[0] = shown
                on_phase(shown)
        seen[0] = len(lines)

    def watch() -> None:
        while not done.wait(0.25):
            read()

    watcher = threading.Thread(target=watch, name="kforge-phases", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        read()


def open_phase(path: Path) -> str:
    """The innermost phase the file shows started and not ended ("timing / torch.compile"),
    "" when none (or no file)."""
    try:
        lines = path.read_text().split("\n")[:-1]
    except OSError:
        return ""
    stack: list[str] = []
    for line in lines:
        if line.startswith("/"):
            if line[1:] in stack:
                del stack[len(stack) - 1 - stack[::-1].index(line[1:]) :]
        else:
            stack.append(line)
    return " / ".join(stack)


def stopped_where(result: Result, phase_file: Path) -> Result:
    """A judge stopped at its time limit: its log says in which phase (PointNet++'s baseline,
    unseen8, timed out at 300 s twice with no word of where)."""
    where = open_phase(phase_file) if result.status is Status.TIMEOUT else ""
    if where:
        result.log += f"\nthe judge was stopped in its phase: {where}"
    return result
