"""The trajectory store: runs, tasks, attempts, results, finalists, confirmations, analyses and every LLM call.

One SQLite file per run folder in WAL mode, so several worker processes can write to it
at once (each write is a short ``BEGIN IMMEDIATE`` transaction; a busy database is waited
for). Each process opens its own connection. :meth:`TrajectoryStore.trajectories` is the reading
API: a run's attempts per task, in order, with their results and analyses.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..tools.result import Result
from ..tools.task import Task

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, task_hash TEXT NOT NULL, policy TEXT NOT NULL, model TEXT,
    settings_json TEXT NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
    started_at REAL NOT NULL, finished_at REAL);
CREATE TABLE IF NOT EXISTS tasks (
    task_hash TEXT PRIMARY KEY, name TEXT NOT NULL, path TEXT NOT NULL, source TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS attempts (
    run_id TEXT NOT NULL, attempt_id TEXT NOT NULL, task_hash TEXT NOT NULL, round INTEGER NOT NULL,
    idx INTEGER NOT NULL, source TEXT NOT NULL, strategy TEXT NOT NULL, plan TEXT NOT NULL,
    analysis TEXT NOT NULL, raw TEXT NOT NULL, error TEXT NOT NULL, policy TEXT NOT NULL, model TEXT,
    created_at REAL NOT NULL, parent TEXT NOT NULL DEFAULT '', PRIMARY KEY (run_id, attempt_id));
CREATE TABLE IF NOT EXISTS results (
    run_id TEXT NOT NULL, attempt_id TEXT NOT NULL, status TEXT NOT NULL, speedup_vs_eager REAL,
    candidate_ms REAL, result_json TEXT NOT NULL, created_at REAL NOT NULL,
    PRIMARY KEY (run_id, attempt_id));
CREATE TABLE IF NOT EXISTS confirmations (
    run_id TEXT NOT NULL, attempt_id TEXT NOT NULL, status TEXT NOT NULL, result_json TEXT NOT NULL,
    created_at REAL NOT NULL, PRIMARY KEY (run_id, attempt_id));
CREATE TABLE IF NOT EXISTS finalists (
    run_id TEXT NOT NULL, attempt_id TEXT NOT NULL, status TEXT NOT NULL, result_json TEXT NOT NULL,
    created_at REAL NOT NULL, PRIMARY KEY (run_id, attempt_id));
CREATE TABLE IF NOT EXISTS analyses (
    run_id TEXT NOT NULL, round INTEGER NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL,
    created_at REAL NOT NULL, PRIMARY KEY (run_id, round, kind));
CREATE TABLE IF NOT EXISTS llm_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, role TEXT NOT NULL,
    round INTEGER NOT NULL, model TEXT, request_json TEXT NOT NULL, response TEXT NOT NULL,
    prompt_tokens INTEGER, completion_tokens INTEGER, latency_s REAL NOT NULL,
    error TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL);
"""


USER_POLICY = "user"  # the policy of an attempt the user wrote (chat's /eval)
BATCH_POLICY = "batch"  # the task's own module, a batch's finalist (batch.job.AS_WRITTEN): no proposal


@dataclasses.dataclass
class AttemptRecord:
    """One proposed candidate as stored (its result lives in ``results``)."""

    attempt_id: str
    round: int
    idx: int
    source: str
    strategy: str
    plan: str = ""
    analysis: str = ""
    raw: str = ""
    error: str = ""
    policy: str = ""
    model: str | None = None
    parent: str = ""  # the attempt it builds on ("": the task's own module)


@dataclasses.dataclass
class LLMCallRecord:
    role: str  # "planner", "coder" or "critic"
    round: int
    model: str | None
    messages: list[dict[str, str]]
    response: str
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float
    error: str = ""


@dataclasses.dataclass
class TrajectoryStep:
    attempt: AttemptRecord
    result: Result | None  # None while not yet evaluated


@dataclasses.dataclass
class Trajectory:
    run_id: str
    task_name: str
    task_hash: str
    steps: list[TrajectoryStep]
    analyses: dict[int, dict[str, str]]  # round -> kind ("plan", "critic") -> text


def _add_parent_column(conn: sqlite3.Connection) -> None:
    """Stores written before attempts had parents get the column (empty: built on the task)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(attempts)")}
        if "parent" not in columns:
            conn.execute("ALTER TABLE attempts ADD COLUMN parent TEXT NOT NULL DEFAULT ''")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class TrajectoryStore:
    def __init__(self, path: Path, *, busy_timeout_s: float = 60.0) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._lock = threading.Lock()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():  # one connection per process
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(SCHEMA)
            _add_parent_column(conn)
            conn.row_factory = sqlite3.Row
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._connection().execute(sql, args).fetchall()

    def close(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None

    # Writing

    def start_run(
        self, run_id: str, task: Task, *, policy: str, model: str | None, settings: dict[str, Any]
    ) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO tasks VALUES (?, ?, ?, ?)",
                (task.hash, task.name, str(task.path), task.source),
            )
            conn.execute(
                "INSERT INTO runs (run_id, task_hash, policy, model, settings_json, status, started_at)"
                " VALUES (?, ?, ?, ?, ?, 'running', ?) ON CONFLICT(run_id) DO UPDATE SET status='running',"
                " policy=excluded.policy, model=excluded.model",
                (run_id, task.hash, policy, model, json.dumps(settings), time.time()),
            )

    def finish_run(self, run_id: str, status: str, reason: str) -> None:
        with self._write() as conn:
            conn.execute(
                "UPDATE runs SET status=?, reason=?, finished_at=? WHERE run_id=?",
                (status, reason, time.time(), run_id),
            )

    def add_attempt(self, run_id: str, task_hash: str, attempt: AttemptRecord) -> None:
        row = dataclasses.asdict(attempt)
        with self._write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO attempts (run_id, attempt_id, task_hash, round, idx, source, strategy,"
                " plan, analysis, raw, error, policy, model, created_at, parent) VALUES (:run_id, :attempt_id,"
                " :task_hash, :round, :idx, :source, :strategy, :plan, :analysis, :raw, :error, :policy, :model,"
                " :created_at, :parent)",
                {**row, "run_id": run_id, "task_hash": task_hash, "created_at": time.time()},
            )

    def add_result(self, run_id: str, attempt_id: str, result: Result) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO results VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    attempt_id,
                    result.status.value,
                    result.speedup_vs_eager,
                    result.candidate_ms,
                    result.dumps(),
                    time.time(),
                ),
            )

    def add_confirmation(self, run_id: str, attempt_id: str, result: Result) -> None:
        """The batch's confirmation of an attempt: measured again on new inputs and weights.
        A best that fails it (status not ok) is no example to learn from."""
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO confirmations VALUES (?, ?, ?, ?, ?)",
                (run_id, attempt_id, result.status.value, result.dumps(), time.time()),
            )

    def add_finalist(self, run_id: str, attempt_id: str, result: Result) -> None:
        """The batch's first re-measure of one of a run's finalists (the attempts it chooses its
        best among); the one chosen is measured once more, its confirmation."""
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO finalists VALUES (?, ?, ?, ?, ?)",
                (run_id, attempt_id, result.status.value, result.dumps(), time.time()),
            )

    def add_analysis(self, run_id: str, round: int, kind: str, text: str) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO analyses VALUES (?, ?, ?, ?, ?)",
                (run_id, round, kind, text, time.time()),
            )

    def add_llm_call(self, run_id: str, call: LLMCallRecord) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO llm_calls (run_id, role, round, model, request_json, response, prompt_tokens,"
                " completion_tokens, latency_s, error, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    call.role,
                    call.round,
                    call.model,
                    json.dumps(call.messages),
                    call.response,
                    call.prompt_tokens,
                    call.completion_tokens,
                    call.latency_s,
                    call.error,
                    time.time(),
                ),
            )

    # Reading

    def attempts(self, run_id: str, round: int | None = None) -> list[AttemptRecord]:
        sql = "SELECT * FROM attempts WHERE run_id=?" + (" AND round=?" if round is not None else "")
        args: tuple[Any, ...] = (run_id,) if round is None else (run_id, round)
        rows = self._read(sql + " ORDER BY round, idx", args)
        names = [f.name for f in dataclasses.fields(AttemptRecord)]
        return [AttemptRecord(**{n: row[n] for n in names}) for row in rows]

    def results(self, run_id: str) -> dict[str, Result]:
        rows = self._read("SELECT attempt_id, result_json FROM results WHERE run_id=?", (run_id,))
        return {row["attempt_id"]: Result.from_json(json.loads(row["result_json"])) for row in rows}

    def confirmations(self, run_id: str) -> dict[str, Result]:
        rows = self._read("SELECT attempt_id, result_json FROM confirmations WHERE run_id=?", (run_id,))
        return {row["attempt_id"]: Result.from_json(json.loads(row["result_json"])) for row in rows}

    def finalists(self, run_id: str) -> dict[str, Result]:
        rows = self._read("SELECT attempt_id, result_json FROM finalists WHERE run_id=?", (run_id,))
        return {row["attempt_id"]: Result.from_json(json.loads(row["result_json"])) for row in rows}

    def analysis(self, run_id: str, round: int, kind: str) -> str | None:
        rows = self._read(
            "SELECT text FROM analyses WHERE run_id=? AND round=? AND kind=?", (run_id, round, kind)
        )
        return rows[0]["text"] if rows else None

    def analyses(self, run_id: str) -> dict[int, dict[str, str]]:
        out: dict[int, dict[str, str]] = {}
        for row in self._read(
            "SELECT round, kind, text FROM analyses WHERE run_id=? ORDER BY round", (run_id,)
        ):
            out.setdefault(row["round"], {})[row["kind"]] = row["text"]
        return out

    def llm_calls(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._read("SELECT * FROM llm_calls WHERE run_id=? ORDER BY id", (run_id,))
        return [dict(row) for row in rows]

    def task(self, task_hash: str) -> Task:
        rows = self._read("SELECT name, path, source FROM tasks WHERE task_hash=?", (task_hash,))
        if not rows:
            raise KeyError(f"no task {task_hash} in {self.path}")
        return Task(name=rows[0]["name"], path=Path(rows[0]["path"]), source=rows[0]["source"])

    def run_info(self, run_id: str) -> dict[str, Any] | None:
        rows = self._read("SELECT * FROM runs WHERE run_id=?", (run_id,))
        return dict(rows[0]) if rows else None

    def trajectories(self, run_id: str) -> list[Trajectory]:
        """The run's attempts per task, in order (round, then index), with results and analyses."""
        results = self.results(run_id)
        analyses = self.analyses(run_id)
        tasks = self._read(
            "SELECT DISTINCT t.task_hash, t.name FROM tasks t JOIN runs r ON r.task_hash=t.task_hash"
            " WHERE r.run_id=?",
            (run_id,),
        )
        by_task: dict[str, list[TrajectoryStep]] = {row["task_hash"]: [] for row in tasks}
        task_of = {
            row["attempt_id"]: row["task_hash"]
            for row in self._read("SELECT attempt_id, task_hash FROM attempts WHERE run_id=?", (run_id,))
        }
        for attempt in self.attempts(run_id):
            step = TrajectoryStep(attempt=attempt, result=results.get(attempt.attempt_id))
            by_task.setdefault(task_of[attempt.attempt_id], []).append(step)
        names = {row["task_hash"]: row["name"] for row in tasks}
        return [
            Trajectory(run_id=run_id, task_name=names.get(h, h), task_hash=h, steps=steps, analyses=analyses)
            for h, steps in by_task.items()
        ]
