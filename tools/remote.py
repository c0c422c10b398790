"""The judge's handle on the candidate worker (:mod:`.candidate_worker`): requests over a
:class:`~.wire.Channel`, replies checked for shape before anything else reads them.

Whatever the candidate process answers is data: its outputs are compared here, its timings
are claims (:mod:`.claims`), its observations are reasons to reject it and nothing more.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import torch

from .wire import Channel, WireError


class CandidateFailed(Exception):
    """The candidate raised, or its worker died or answered nonsense. ``phase`` says when."""

    def __init__(self, phase: str, message: str) -> None:
        super().__init__(f"{phase}: {message}")
        self.phase = phase
        self.message = message


class CandidateFormatError(Exception):
    """ModelNew is missing or does not take Model's constructor arguments."""


class RemoteCandidate:
    def __init__(self, channel: Channel, device: torch.device) -> None:
        self.channel = channel
        self.device = device
        self.observed: list[str] = []  # what the worker's own guards reported
        self.inputs_changed = False
        self.midway = False  # a request that raised between its send and its whole answer

    def request(self, phase: str, kind: str, fields: dict[str, Any] | None = None, tree: Any = None) -> Any:
        """Send one request and return (fields, tree) of the answer; a failure raises."""
        self.midway = True  # left so when this raises (out of memory receiving the answer, say)
        try:
            self.channel.send(kind, fields, tree)
            answer, reply, out = self.channel.recv(self.device)
        except WireError as err:
            raise CandidateFailed(phase, f"the candidate worker stopped answering ({err})") from None
        self.midway = False
        if answer == "error":
            raise CandidateFailed(phase, str(reply.get("message", "")))
        if answer != "ok":
            raise CandidateFailed(phase, f"unexpected answer {answer!r}")
        return reply, out

    def build(self, init: list[Any], seed: int) -> dict[str, list[int]]:
        """ModelNew(*init) under ``seed``: its state's names and shapes."""
        reply, _ = self.request("constructor", "build", {"seed": seed}, list(init))
        if reply.get("format_error"):
            raise CandidateFormatError(str(reply["format_error"]))
        return {str(k): [int(n) for n in shape] for k, shape in reply.get("state", [])}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        self.request("load_state_dict", "load_state", {"keys": list(state)}, list(state.values()))

    def call(self, inputs: list[Any], reuse: bool, spec: list[Any]) -> Any:
        """The candidate's output on ``inputs`` (``reuse``: written into its previous inputs)."""
        wire_spec = [[list(s[0]), str(s[1]).removeprefix("torch.")] if s else None for s in spec]
        reply, out = self.request("forward", "call", {"reuse": reuse, "spec": wire_spec}, list(inputs))
        self.observed += [str(x) for x in reply.get("observed", [])]
        self.inputs_changed = self.inputs_changed or bool(reply.get("inputs_changed"))
        return out

    def report(self, detail: bool = False) -> dict[str, Any]:
        reply, _ = self.request("report", "report", {"detail": detail})
        self.observed += [str(x) for x in reply.get("observed", [])]
        return dict(reply)

    def close(self) -> None:
        try:
            self.channel.send("exit")
        except WireError:
            pass


class Echo:
    """A thread of this process that sends back each byte written to it: the time of one round
    trip is two wake-ups of a sleeping task, as in a block sent to the candidate's worker, but
    measured on a task the candidate does not control. On a loaded host a wake-up waits for a
    core (milliseconds on two busy cores); the judge's wall-clock check takes what this echo
    waited in the same round off the candidate's block (:func:`.claims.hidden_time_reason`)."""

    def __init__(self) -> None:
        self._ask_r, self._ask_w = os.pipe()
        self._ans_r, self._ans_w = os.pipe()
        threading.Thread(target=self._serve, name="kforge-echo", daemon=True).start()

    def _serve(self) -> None:
        while os.read(self._ask_r, 1):
            os.write(self._ans_w, b"e")

    def ms(self) -> float:
        start = time.perf_counter()
        os.write(self._ask_w, b"e")
        os.read(self._ans_r, 1)
        return (time.perf_counter() - start) * 1e3


class RemoteSlot:
    """The candidate as a slot of :meth:`~.timing.Timer.time_many`: each block runs in the
    candidate's process and comes back as claimed times and checksums. Before each block, the
    round trip of a trusted :class:`Echo` (``echoes``, one per block)."""

    def __init__(self, candidate: RemoteCandidate) -> None:
        self.candidate = candidate
        self.echo = Echo()
        self.echoes: list[float] = []
        self.claims: list[float] = []
        self.checksums: list[Any] = []
        self.sets: list[int] = []
        self.last_reply: dict[str, Any] = {}
        self.last_output: Any = None  # never sent per block: fetched once after the rounds (fetch_last)

    def warm(self, calls: int) -> None:
        self.candidate.request("warm-up", "warm", {"calls": calls})

    def before_block(self) -> None:
        self.echoes.append(self.echo.ms())

    def block(self, size: int) -> list[float]:
        reply, _ = self.candidate.request("timing", "block", {"size": size})
        self.last_reply = reply
        times = [float(x) for x in reply.get("times_ms", [])]
        sums, sets = list(reply.get("checksums", [])), [int(x) for x in reply.get("sets", [])]
        if not (len(times) == len(sums) == len(sets) == size):
            raise CandidateFailed("timing", f"a block of {size} calls answered with {len(times)} times")
        self.claims += times
        self.checksums += sums
        self.sets += sets
        return times

    def after_block(self) -> None:
        pass  # the worker hands its own cached memory back (CandidateServer.serve)

    def fetch_last(self) -> tuple[int, Any]:
        """The output of the last timed call and the input set it ran on."""
        reply, out = self.candidate.request("timing", "last_output")
        return int(reply.get("set", -1)), out
