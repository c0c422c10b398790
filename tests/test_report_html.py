"""``kforge report`` in a real headless browser (Debian's Chromium, driven through the
DevTools protocol): the batch report of a recorded KernelBench batch loads with no console
error and its screenshot shows the plots; a page with a console error is caught."""

from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

BROWSER = shutil.which("chromium")
BATCH = Path(__file__).parents[1] / "docs" / "data" / "kb-h200-tf32-v3"
TASK = Path(__file__).parent / "fixtures" / "batch" / "tasks" / "linear_sum.py"
CLI = [sys.executable, "-c", "from kforge.agent.cli import main; main()", "report"]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--hide-scrollbars",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "--window-size=1280,1400"]  # fmt: skip


class Page:
    """One browser tab over the DevTools protocol: console errors and uncaught exceptions are
    collected while a page loads."""

    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self.errors: list[str] = []
        self.next_id = 0
        for method in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.call(method)

    def call(self, method: str, **params: object) -> dict:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=60))
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return message.get("result", {})
            self._note(message)

    def _note(self, message: dict) -> None:
        params = message.get("params", {})
        if message.get("method") == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            self.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif message.get("method") == "Runtime.exceptionThrown":
            self.errors.append(
                params["exceptionDetails"].get("exception", {}).get("description", "exception")
            )
        elif message.get("method") == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.errors.append(params["entry"]["text"])

    def load(self, path: Path) -> None:
        self.call("Page.navigate", url=path.resolve().as_uri())
        while True:  # until the load event; what was logged on the way is noted
            message = json.loads(self.socket.recv(timeout=60))
            self._note(message)
            if message.get("method") == "Page.loadEventFired":
                break
        self.call("Runtime.evaluate", expression="1")  # the messages sent with the load are in

    def evaluate(self, expression: str) -> object:
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])


def _tab_url(profile: Path) -> str:
    """The DevTools websocket of the browser's first tab (its port is written to the profile)."""
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 30
    while not port_file.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    port = port_file.read_text().split()[0]
    targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list").read())
    return next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")


@pytest.fixture
def page(tmp_path):
    if BROWSER is None:
        pytest.skip("needs chromium (apt-get install chromium)")
    from websockets.sync.client import connect

    profile = tmp_path / "profile"
    browser = subprocess.Popen([BROWSER, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        with connect(_tab_url(profile), max_size=None) as socket:
            yield Page(socket)
    finally:
        browser.terminate()
        browser.wait(timeout=30)


def test_batch_report_loads_cleanly_and_shows_its_plots(tmp_path, page):
    from PIL import Image, ImageStat

    folder = tmp_path / "batch"
    shutil.copytree(BATCH, folder)
    done = subprocess.run([*CLI, str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = folder / "report.html"
    assert Path(done.stdout.strip()) == report
    assert "http" not in report.read_text().split("<body>")[0]  # nothing fetched: styles inline
    page.load(report)
    assert page.errors == []
    plots = page.evaluate(
        "Array.from(document.querySelectorAll('img.plot')).map(i => {const r = i.getBoundingClientRect();"
        " return [i.naturalWidth, i.naturalHeight, r.x, r.y, r.width, r.height]})"
    )
    assert isinstance(plots, list) and len(plots) == 3  # distribution, fast_p, roofline
    shot = Image.open(io.BytesIO(page.screenshot())).convert("L")
    for natural_w, natural_h, x, y, w, h in plots:
        assert natural_w > 300 and natural_h > 200  # the PNG decoded
        region = shot.crop((int(x), int(y), int(x + w), int(min(y + h, shot.height))))
        assert region.height > 100 and ImageStat.Stat(region).stddev[0] > 20  # drawn, not blank
    rows = page.evaluate("document.querySelectorAll('#tasks tbody tr').length")
    assert rows == 60
    first = "document.querySelector('#tasks tbody tr').cells[0].textContent"
    page.evaluate("document.querySelectorAll('#tasks th')[3].click()")  # sort by speedup vs eager
    page.evaluate("document.querySelectorAll('#tasks th')[3].click()")  # descending
    fastest = max((json.loads(t) for t in (folder / "results.jsonl").read_text().splitlines()),
                  key=lambda x: x.get("speedup_vs_eager") or 0)  # fmt: skip
    assert page.evaluate(first) == fastest["task"]
    assert page.errors == []


def test_a_console_error_is_caught(tmp_path, page):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>console.error('boom'); missing_function();</script></body></html>")
    page.load(bad)
    assert any("boom" in e for e in page.errors) and any("missing_function" in e for e in page.errors)


def test_report_of_a_folder_that_is_neither_exits_2(tmp_path):
    done = subprocess.run([*CLI, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "neither a batch folder" in done.stderr


def _run_folder(folder: Path) -> Path:
    """A run folder written through the real store: the recorded result of a KernelBench
    task's best candidate, and a failed attempt with its log."""
    from kforge.agent.store import AttemptRecord, TrajectoryStore
    from kforge.tools.result import Result, Status
    from kforge.tools.task import load_task

    (folder / "task").mkdir(parents=True)
    reference = TASK.read_text()
    (folder / "task" / TASK.name).write_text(reference)
    (folder / "run.json").write_text(
        json.dumps({"run_id": "r1", "task": f"task/{TASK.name}", "settings": {}})
    )
    task = load_task(folder / "task" / TASK.name)
    recorded = json.loads((BATCH / "results.jsonl").read_text().splitlines()[0])["result"]
    faster = reference.replace(
        "x = x / 2\n        x = torch.sum(x, dim=1, keepdim=True)", "x = x.sum(1, keepdim=True) / 2"
    )
    store = TrajectoryStore(folder / "trajectories.db")
    store.start_run("r1", task, policy="embedded", model=None, settings={})
    for attempt_id, source, result in (
        ("r1-c0", faster, Result.from_json(recorded)),
        (
            "r1-c1",
            reference.replace("x / 2", "x / 3"),
            Result(status=Status.INCORRECT, log="max abs err 0.5"),
        ),
    ):
        store.add_attempt("r1", task.hash, AttemptRecord(attempt_id=attempt_id, round=1, idx=0, source=source,
                                                         strategy="fx-rewrite", analysis="reads M*N once"))  # fmt: skip
        store.add_result("r1", attempt_id, result)
    store.finish_run("r1", "finished", "rounds done")
    store.close()
    return folder


def test_run_report_shows_every_attempt_with_highlighted_code_and_diff(tmp_path, page):
    folder = _run_folder(tmp_path / "run")
    done = subprocess.run([*CLI, str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    page.load(folder / "report.html")
    assert page.errors == []
    assert page.evaluate("document.querySelectorAll('h3').length") == 2  # both attempts
    assert "reads M*N once" in str(page.evaluate("document.body.innerText"))
    # highlighted: coloured spans in the code blocks; the diffs mark the changed lines
    assert page.evaluate("document.querySelectorAll('div.highlight span[style]').length") > 20
    diff = str(
        page.evaluate("Array.from(document.querySelectorAll('details')).map(d => d.textContent).join()")
    )
    assert "+        x = x.sum(1, keepdim=True) / 2" in diff and "+        x = x / 3" in diff
    assert "-        x = torch.sum(x, dim=1, keepdim=True)" in diff
