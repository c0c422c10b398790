"""The conversation of a chat session, kept in ``chat.db`` (SQLite) in the run folder.

Until a task is loaded there is no run folder: entries wait in memory and are written when
the session is attached to one. ``--resume`` reads them back (screen and prompt history).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, role TEXT NOT NULL, content TEXT NOT NULL, at REAL NOT NULL);
"""

Entry = tuple[str, str]  # (role, content); role is "user" (a typed line) or "assistant"


class ChatLog:
    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self._conn: sqlite3.Connection | None = None

    def attach(self, path: Path) -> None:
        """Keep the conversation in ``path`` from now on: read what it holds, write what is new."""
        conn = sqlite3.connect(path, isolation_level=None)
        conn.executescript(SCHEMA)
        stored = [
            (role, content)
            for role, content in conn.execute("SELECT role, content FROM messages ORDER BY id")
        ]
        for role, content in self.entries:
            conn.execute(
                "INSERT INTO messages (role, content, at) VALUES (?, ?, ?)", (role, content, time.time())
            )
        if self._conn is not None:
            self._conn.close()
        self._conn = conn
        self.entries = stored + self.entries

    def add(self, role: str, content: str) -> None:
        self.entries.append((role, content))
        if self._conn is not None:
            self._conn.execute(
                "INSERT INTO messages (role, content, at) VALUES (?, ?, ?)", (role, content, time.time())
            )

    def user_lines(self) -> list[str]:
        return [content for role, content in self.entries if role == "user"]
