"""``results.jsonl``: one JSON line per finished task, appended whole and flushed by the
batch's one writer. A batch killed while it wrote can leave a half-written last line: readers
leave it out with a one-line warning, and the batch's owner (``run_batch``, holding the
batch lock) moves it to ``results.jsonl.partial`` before it appends again, so that task runs
again on resume."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

RESULTS = "results.jsonl"
PARTIAL = "results.jsonl.partial"

log = logging.getLogger(__name__)


def _record(text: str) -> dict[str, Any] | None:
    """A whole results line (a JSON object with a task and a status), or None."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(value, dict) and isinstance(value.get("task"), str) and "status" in value:
        return value
    return None


def parse(text: str) -> tuple[list[str], list[str]]:
    """The whole lines' text, and the text of those that are not (a last line without its
    newline is unfinished, whatever it holds)."""
    chunks = text.split("\n")
    unfinished = chunks.pop()  # after the last newline: "" when the file ends with one
    whole = [c for c in chunks if c.strip() and _record(c) is not None]
    bad = [c for c in chunks if c.strip() and _record(c) is None]
    return whole, bad + ([unfinished] if unfinished.strip() else [])


def _text(out: Path) -> str:
    path = out / RESULTS
    return path.read_bytes().decode(errors="replace") if path.is_file() else ""


def read_results(out: Path, *, warn: bool = True) -> list[dict[str, Any]]:
    """The batch's whole lines; partial ones are left out, with a warning."""
    whole, bad = parse(_text(out))
    if bad and warn:
        log.warning(
            "%s: %d partial line(s) left out (a batch killed while writing, or still writing)",
            out / RESULTS,
            len(bad),
        )
    return [json.loads(text) for text in whole]


def done_keys(out: Path) -> set[str]:
    return {line["task"] for line in read_results(out, warn=False)}


def set_aside_partial(out: Path) -> None:
    """For the batch's owner, before it appends: lines that are not whole move to
    results.jsonl.partial (kept for a look), results.jsonl keeps the whole ones."""
    whole, bad = parse(_text(out))
    if not bad:
        return
    with (out / PARTIAL).open("a") as fh:
        fh.write("".join(text + "\n" for text in bad))
    fresh = out / f"{RESULTS}.tmp"
    fresh.write_text("".join(text + "\n" for text in whole))
    os.replace(fresh, out / RESULTS)
    log.warning("%s: %d partial line(s) moved to %s; their tasks run again", out / RESULTS, len(bad), PARTIAL)


def append_line(out: Path, line: dict[str, Any]) -> None:
    with (out / RESULTS).open("a") as fh:
        fh.write(json.dumps(line) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
