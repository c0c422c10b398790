"""Optimize and batch runs as child processes of the server.

Each run is ``kforge optimize ... --quiet`` (or ``kforge batch``) in its own process group,
so a crash or a kill never takes the server down. Progress is read back from the run
folder's ``events.jsonl``; a stopped run stays resumable from its checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver.exceptions import ToolError
from rich.text import Text

from ...tools.output import output_folder
from ..events import Event, RichRenderer
from ..logs import last_line
from .workspace import Workspace

CLI = [sys.executable, "-c", "from kforge.agent.cli import main; main()"]
START_TIMEOUT_S = 120.0  # for the child to create its run folder
STOP_GRACE_S = 10.0  # between SIGTERM and SIGKILL
EVENT_TYPES: dict[str, type[Event]] = {cls.kind: cls for cls in Event.__subclasses__()}

OnEvent = Callable[[int, dict[str, Any]], Awaitable[None]]


def describe(event: dict[str, Any]) -> str:
    """One plain line for an ``events.jsonl`` record, as the terminal shows it."""
    if event.get("kind") == "model_progress":
        return str(event.get("text", ""))
    fields = {k: v for k, v in event.items() if k != "kind"}
    typed = EVENT_TYPES[event["kind"]](**fields) if event.get("kind") in EVENT_TYPES else None
    return Text.from_markup(RichRenderer().render(typed)).plain if typed else str(event.get("kind"))


def read_events(folder: Path, start: int = 0) -> list[dict[str, Any]]:
    """Complete lines of ``events.jsonl`` from line ``start`` on (a half-written line waits)."""
    path = folder / "events.jsonl"
    if not path.is_file():
        return []
    lines = path.read_text().split("\n")[:-1]  # the part after the last newline is unfinished
    return [json.loads(line) for line in lines[start:] if line.strip()]


PARENT_ENV = "KFORGE_PARENT_PID"  # the child ends when this server does (agent/cli.py)


class Runs:
    """The server's child processes by run or batch id, and what their folders say."""

    def __init__(self, workspace: Workspace) -> None:
        self.ws = workspace
        self.runs_dir = workspace.out / "runs"
        self.batches_dir = workspace.out / "batches"
        self.models_dir = workspace.out / "models"
        self.logs_dir = workspace.out / "logs"
        self.children: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}  # id -> (process, log)

    def _spawn(self, args: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
        output_folder(self.logs_dir)
        log = self.logs_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}.log"
        with log.open("wb") as fh:
            process = subprocess.Popen(
                [*CLI, *args], stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                cwd=self.ws.root, start_new_session=True, env=os.environ | {PARENT_ENV: str(os.getpid())},
            )  # fmt: skip
        return process, log

    def alive(self, key: str) -> bool:
        child = self.children.get(key)
        return child is not None and child[0].poll() is None

    def log_tail(self, key: str) -> str:
        """The last line of the child's log (read from its end: the log can be huge)."""
        child = self.children.get(key)
        return last_line(child[1]) if child else ""

    def run_folder(self, run_id: str) -> Path:
        if not run_id or Path(run_id).name != run_id:
            raise ToolError(f"{run_id!r} is not a run id: use one that optimize or run_status gave")
        folder = self.runs_dir / run_id
        if not (folder / "run.json").is_file():
            raise ToolError(f"no run {run_id} in {self.runs_dir}")
        return folder

    async def start_optimize(self, task: Path | None, resume: str | None, flags: list[str]) -> str:
        """Start a run (or continue run ``resume``); returns its id once its folder exists."""
        common = ["--out", str(self.runs_dir), "--device", self.ws.device, "--quiet", *flags]
        if resume is not None:
            self.run_folder(resume)
            if self.alive(resume):
                raise ToolError(f"run {resume} is running already")
            self.children[resume] = self._spawn(["optimize", "--resume", resume, *common])
            return resume
        if task is None:
            raise ToolError("give a task (a workspace path or source text), or resume with a run id")
        output_folder(self.runs_dir)
        before = {p.name for p in self.runs_dir.iterdir()}
        process, log = self._spawn(["optimize", str(task), *common])
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            new = [p.parent.name for p in self.runs_dir.glob("*/run.json") if p.parent.name not in before]
            if new:
                self.children[new[0]] = (process, log)
                return new[0]
            if process.poll() is not None:
                raise ToolError(last_line(log) or f"kforge optimize exited with code {process.returncode}")
            await anyio.sleep(0.2)
        self.stop_process(process)
        raise ToolError(f"the run did not start within {START_TIMEOUT_S:.0f} s (log: {log})")

    async def follow(self, run_id: str, on_event: OnEvent, seen: int = 0) -> None:
        """Call ``on_event(n, event)`` for each event of the run after the first ``seen``,
        until its process ends."""
        folder = self.run_folder(run_id)
        while True:
            running = self.alive(run_id)
            for event in read_events(folder, seen):
                seen += 1
                await on_event(seen, event)
            if not running:
                return
            await anyio.sleep(0.25)

    def stop(self, key: str) -> None:
        if key in self.children:
            self.stop_process(self.children[key][0])

    @staticmethod
    def stop_process(process: subprocess.Popen[bytes]) -> None:
        """SIGTERM to the child's process group (its evaluation workers too), then SIGKILL."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if process.poll() is not None:
                return
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                continue

    def stop_all(self) -> None:
        for process, _ in self.children.values():
            self.stop_process(process)

    def status(self, run_id: str) -> dict[str, Any]:
        folder = self.run_folder(run_id)
        events = read_events(folder)
        last = events[-1]["kind"] if events else None
        if self.alive(run_id):
            state = "running"
        else:
            state = {"run_finished": "finished", "run_failed": "failed"}.get(last or "", "interrupted")
        best: dict[str, Any] = next((e for e in reversed(events) if "best_speedup" in e), {})
        status: dict[str, Any] = {
            "run_id": run_id,
            "state": state,
            "resumable": state in ("failed", "interrupted"),
            "evaluated": sum(e["kind"] == "candidate_evaluated" for e in events),
            "best_attempt_id": best.get("best_attempt_id"),
            "best_speedup": best.get("best_speedup"),
            "last_event": describe(events[-1]) if events else None,
            "run_dir": str(folder),
        }
        if state != "running" and self.log_tail(run_id):
            status["log_tail"] = self.log_tail(run_id)
        return status

    def start_batch(self, tasks: list[Path], flags: list[str]) -> str:
        """Start ``kforge batch`` over exactly these task files (checked by the workspace): they
        go to the child in a list file the server writes, never re-read from the caller's."""
        batch_id = f"batch-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        folder = self.batches_dir / batch_id
        folder.mkdir(parents=True)
        listing = folder / "tasks.txt"
        listing.write_text("".join(f"{path}\n" for path in tasks))
        args = [
            "batch",
            str(listing),
            "--out",
            str(folder),
            "--device",
            self.ws.device,
            "--quiet",
            *flags,
        ]
        self.children[batch_id] = self._spawn(args)
        return batch_id

    def batch_status(self, batch_id: str) -> dict[str, Any]:
        from ..batch import read_lines

        folder = self.batches_dir / batch_id
        if Path(batch_id).name != batch_id or (batch_id not in self.children and not folder.is_dir()):
            raise ToolError(f"no batch {batch_id!r}: use an id that batch_start gave")
        running = self.alive(batch_id)
        summary = folder / "summary.json"
        status: dict[str, Any] = {
            "batch_id": batch_id,
            "state": "running" if running else ("finished" if summary.is_file() else "stopped"),
            "results": read_lines(folder) if folder.is_dir() else [],
            "summary": json.loads(summary.read_text()) if summary.is_file() and not running else None,
            "folder": str(folder),
        }
        if not running and self.log_tail(batch_id):
            status["log_tail"] = self.log_tail(batch_id)
        return status

    def start_model(self, spec: str, flags: list[str]) -> str:
        """Start ``kforge model SPEC`` (its file checked by the workspace) in a new folder."""
        model_id = f"model-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        folder = self.models_dir / model_id
        output_folder(folder)
        args = ["model", spec, "--out", str(folder), "--device", self.ws.device, *flags]
        self.children[model_id] = self._spawn(args)
        return model_id

    def model_folder(self, model_id: str) -> Path:
        folder = self.models_dir / model_id
        if Path(model_id).name != model_id or not folder.is_dir():
            raise ToolError(f"no model run {model_id!r}: use an id that optimize_model gave")
        return folder

    def model_status(self, model_id: str) -> dict[str, Any]:
        folder = self.model_folder(model_id)
        running = self.alive(model_id)
        summary = folder / "summary.json"
        done = summary.is_file()
        events = read_events(folder)
        status: dict[str, Any] = {
            "model_id": model_id,
            "state": "running" if running else ("finished" if done else "stopped"),
            "progress": [describe(e) for e in events[-8:]],
            "summary": json.loads(summary.read_text()) if done and not running else None,
            "patch": str(folder / "kforge_patch.py") if (folder / "kforge_patch.py").is_file() else None,
            "tasks": sorted(str(p) for p in (folder / "tasks").glob("*.py")),
            "report": str(folder / "report.html") if done and not running else None,
            "folder": str(folder),
        }
        if not running and self.log_tail(model_id):
            status["log_tail"] = self.log_tail(model_id)
        return status
