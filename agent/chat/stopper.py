"""``/stop`` while a round runs. The round runs in the main thread, as in ``kforge optimize``, so
Ctrl-C, the sandbox's kill of the worker's process group on KeyboardInterrupt and ``optimize``'s
``stopped`` bookkeeping work unchanged. Meanwhile a thread reads the lines typed: ``/stop``
sends SIGINT to the main thread, which is then exactly a Ctrl-C; other lines are kept in
``typed`` and run once the round is over. While the run asks a question (an interrupt's
prompt) the thread reads nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import threading
from collections.abc import Iterator
from types import TracebackType

from rich.console import Console

ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # terminal answers (cursor reports) are not typed text
HINT = "type /stop (or Ctrl-C) to stop the round: what landed is kept"


class StopListener:
    def __init__(self, console: Console, fd: int = 0) -> None:
        self.console, self.fd = console, fd
        self._lock = threading.Lock()  # held while the thread waits on or reads the terminal
        self._paused = False
        self._done = threading.Event()
        self._stopping = False
        self._ignored = False  # SIGINT was ignored when the round began (restored after it)
        self.typed: list[str] = []  # lines typed meanwhile, to run after the round
        self._thread = threading.Thread(target=self._listen, name="kforge-stop", daemon=True)

    def __enter__(self) -> StopListener:
        # A process started with SIGINT ignored (``kforge chat &`` from a script, nohup) would
        # ignore /stop's signal too: the round's own handler is Python's, as in a terminal.
        self._ignored = (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        )
        if self._ignored:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        self.console.print(f"[dim]{HINT}[/]", highlight=False)
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._done.set()
        self._thread.join()
        if self._ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Leave the terminal to a prompt of the main thread."""
        with self._lock:
            self._paused = True
        try:
            yield
        finally:
            self._paused = False

    def _listen(self) -> None:
        # Ctrl-C's SIGINT must reach the main thread: a signal handled by this thread's C handler
        # may wait there until the main thread next switches threads.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        typed = ""
        while not self._done.is_set():
            with self._lock:
                data = b"" if self._paused else self._read()
            if data is None:
                return  # the terminal is gone
            typed += ESCAPES.sub("", data.decode(errors="replace"))
            while "\n" in typed:
                line, _, typed = typed.partition("\n")
                self._typed(line.strip())
            if self._paused:
                self._done.wait(0.05)

    def _read(self) -> bytes | None:
        try:
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if not ready:
                return b""
            data = os.read(self.fd, 4096)
        except OSError:
            return None
        return data or None  # b"": end of input

    def _typed(self, line: str) -> None:
        if line == "/stop" and not self._stopping and not self._done.is_set():
            self._stopping = True  # one signal: a second one could land in optimize's own cleanup
            self.console.print("stopping the round ...", highlight=False)
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        elif self._stopping:
            self.console.print("stopping the round ...", highlight=False)
        elif line and line != "/stop":
            self.typed.append(line)
            self.console.print(
                f"{line!r} runs when the round is over (/stop stops it)", highlight=False, markup=False
            )
