"""``kforge mcp`` driven by the SDK's own stdio client, as an IDE agent drives it."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client  # noqa: E402

pytestmark = pytest.mark.slow  # end to end: left out of the quick loop (-m 'not slow and not gpu')

FIXTURES = Path(__file__).parent / "fixtures"
IDE_DOC = Path(__file__).parents[1] / "docs" / "ide.md"
INSTALLED = Path(sys.executable).parent / "kforge"  # the script pip installed beside this python
KFORGE = (
    [str(INSTALLED)]
    if INSTALLED.is_file()
    else [sys.executable, "-c", "from kforge.agent.cli import main; main()"]
)


def documented_configs() -> list[dict[str, Any]]:
    """The JSON snippets of docs/ide.md, parsed."""
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", IDE_DOC.read_text(), re.S)]


def test_the_documented_configs_parse_and_run_kforge_mcp() -> None:
    configs = documented_configs()
    servers = [c.get("mcpServers", c.get("servers", c.get("context_servers")))["kforge"] for c in configs]
    assert len(servers) == 3
    assert all(s["command"] == "kforge" and s["args"][:2] == ["mcp", "--root"] for s in servers)
    assert 'claude mcp add kforge -- kforge mcp --root "$PWD"' in IDE_DOC.read_text()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace with a tiny task and a candidate for it that crashes its worker."""
    root = tmp_path / "ws"
    (root / "candidates").mkdir(parents=True)
    shutil.copy(FIXTURES / "tasks" / "scale_relu.py", root / "scale_relu.py")
    shutil.copy(FIXTURES / "candidates" / "segfault.py", root / "candidates" / "segfault.py")
    (tmp_path / "secret.py").write_text("token = 1\n")
    return root


@asynccontextmanager
async def connect(root: Path) -> AsyncIterator[ClientSession]:
    """The VS Code registration from docs/ide.md, on the CPU, started by the SDK's stdio client."""
    vscode = next(c["servers"]["kforge"] for c in documented_configs() if "servers" in c)
    args = [a.replace("${workspaceFolder}", str(root)) for a in vscode["args"]] + ["--device", "cpu"]
    passed = {k: os.environ[k] for k in ("PYTHONPATH", "KFORGE_CACHE") if k in os.environ}  # this checkout
    env = get_default_environment() | passed
    params = StdioServerParameters(command=KFORGE[0], args=[*KFORGE[1:], *args], cwd=root, env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def drive(root: Path, body: Callable[[ClientSession], Awaitable[None]]) -> None:
    async def main() -> None:
        async with connect(root) as session:
            with anyio.fail_after(240):
                await body(session)

    anyio.run(main)


def text(result: Any) -> str:
    return "\n".join(block.text for block in result.content if hasattr(block, "text"))


def test_lists_tools_resources_and_the_prompt(workspace: Path) -> None:
    async def body(session: ClientSession) -> None:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        expected = {"hardware", "evaluate", "optimize", "run_status", "get_report", "get_best"}
        assert expected | {"search_docs", "batch_start", "batch_status"} <= set(tools)
        assert tools["evaluate"].description and "ModelNew" in tools["evaluate"].description
        assert {"task", "candidate"} <= set(tools["evaluate"].input_schema["properties"])
        uris = {str(r.uri) for r in (await session.list_resources()).resources}
        assert {"kforge://runs", "kforge://hardware", "kforge://corpus/guides/coalescing.md"} <= uris
        templates = {t.uri_template for t in (await session.list_resource_templates()).resource_templates}
        assert "kforge://runs/{run_id}/report" in templates
        guide = await session.read_resource("kforge://corpus/guides/coalescing.md")
        assert "coalesc" in guide.contents[0].text.lower()
        sheet = await session.read_resource("kforge://hardware")
        assert "No CUDA GPU detected" in sheet.contents[0].text
        prompt = await session.get_prompt("make_faster", {"path": "model.py"})
        assert "model.py" in prompt.messages[0].content.text
        assert (await session.call_tool("hardware", {})).structured_content == {"gpu": None}
        await bad_arguments_are_tool_errors(session, workspace)

    drive(workspace, body)


async def bad_arguments_are_tool_errors(session: ClientSession, workspace: Path) -> None:
    """Bad values and paths outside the workspace give one-line tool errors; the server lives on."""
    calls: list[tuple[str, dict[str, Any], str]] = [
        (
            "evaluate",
            {"task": "../secret.py", "candidate": "candidates/segfault.py"},
            "outside the workspace",
        ),
        ("evaluate", {"task": str(workspace.parent / "secret.py"), "candidate": "x.py"}, "outside"),
        ("evaluate", {"task": "nope.py", "candidate": "candidates/segfault.py"}, "no such task"),
        (
            "evaluate",
            {"task": "scale_relu.py", "candidate": "candidates/segfault.py", "precision": "fp8"},
            "unknown precision",
        ),
        ("optimize", {"task": "scale_relu.py", "rounds": 0}, "rounds must be at least 1"),
        ("optimize", {"task": "/etc/passwd.py"}, "outside the workspace"),
        ("run_status", {"run_id": "../../etc"}, "is not a run id"),
        ("get_best", {"run_id": "no-such-run"}, "no run no-such-run"),
        ("batch_start", {"paths": ["../"]}, "outside the workspace"),
        ("evaluate", {"task": 3}, "validation error"),
    ]
    for name, arguments, message in calls:
        result = await session.call_tool(name, arguments)
        assert result.is_error, (name, arguments)
        assert message in text(result), (name, text(result))
        if arguments.get("task") != 3:  # the SDK's own schema check says more
            assert "\n" not in text(result).strip(), text(result)
    assert (await session.call_tool("hardware", {})).is_error is False


def test_evaluates_on_the_cpu_and_survives_a_crashing_worker(workspace: Path) -> None:
    async def body(session: ClientSession) -> None:
        fast = {"trials": 2, "timing_trials": 3}
        source = (FIXTURES / "candidates" / "scale_relu_torch.py").read_text()  # given as text
        ok = await session.call_tool("evaluate", {"task": "scale_relu.py", "candidate": source, **fast})
        assert not ok.is_error, text(ok)
        assert ok.structured_content["status"] == "ok" and ok.structured_content["speedup_vs_eager"] > 0
        crash = await session.call_tool(
            "evaluate", {"task": "scale_relu.py", "candidate": "candidates/segfault.py", **fast}
        )
        assert crash.structured_content["status"] == "runtime_error"
        assert "SIGSEGV" in crash.structured_content["log"]
        assert (await session.call_tool("hardware", {})).is_error is False  # the server lives on

    drive(workspace, body)


def test_optimize_reports_progress_is_cancelled_and_resumes(workspace: Path) -> None:
    async def optimize_until(session: ClientSession, arguments: dict[str, Any], count: int) -> list[str]:
        """Call optimize, and cancel the call (MCP cancellation) after ``count`` notifications.
        Each call keeps its own messages: a cancelled call's late notifications stay its own."""
        enough = anyio.Event()
        messages: list[str] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            messages.append(message or "")
            if len(messages) >= count:
                enough.set()

        async with anyio.create_task_group() as group:

            async def call() -> None:
                result = await session.call_tool("optimize", arguments, progress_callback=on_progress)
                pytest.fail(f"optimize ended before it was cancelled: {text(result)} {messages}")

            group.start_soon(call)
            await enough.wait()
            group.cancel_scope.cancel()
        return messages

    async def body(session: ClientSession) -> None:
        first = await optimize_until(
            session, {"task": "scale_relu.py", "rounds": 3, "candidates": 2, "timing_trials": 3}, 2
        )
        run_id = first[0].split(":")[0]
        assert "optimizing scale_relu" in first[0], first
        with anyio.fail_after(30):
            while (status := (await session.call_tool("run_status", {"run_id": run_id})).structured_content)[
                "state"
            ] == "running":
                await anyio.sleep(0.2)
        assert status["state"] == "interrupted" and status["resumable"], status
        assert f"# kforge run {run_id}" in text(await session.call_tool("get_report", {"run_id": run_id}))
        listed = json.loads((await session.read_resource("kforge://runs")).contents[0].text)
        assert [(r["run_id"], r["state"]) for r in listed] == [(run_id, "interrupted")]

        resumed = [m.split(" -> ")[0] for m in await optimize_until(session, {"resume": run_id}, 1)]
        assert resumed[0] == f"{run_id}: resuming scale_relu with embedded", resumed

    drive(workspace, body)


@pytest.fixture
def hostile_workspace(workspace: Path) -> Path:
    """Ways out of the workspace that a batch's inputs can hide, and files that are not text."""
    outside = workspace.parent / "secret.py"
    (workspace / "lists").mkdir()
    (workspace / "lists" / "out.txt").write_text("../scale_relu.py\n../../secret.py\n")
    (workspace / "lists" / "in.txt").write_text("# inside\n../scale_relu.py\n")
    (workspace / "lists" / "binary.txt").write_bytes(b"\xff\xfe../scale_relu.py\n")
    (workspace / "link.py").symlink_to(outside)
    (workspace / "linked").mkdir()
    (workspace / "linked" / "a.py").symlink_to(outside)
    (workspace / "not_utf8.py").write_bytes(b"\xff\xfeclass Model: pass\n")
    task = (workspace / "scale_relu.py").read_text()
    (workspace / "exits_at_import.py").write_text("import os\nos._exit(3)\n" + task)
    return workspace


def test_batch_and_evaluate_paths_stay_in_the_workspace_with_one_line_reasons(
    hostile_workspace: Path,
) -> None:
    async def refused(session: ClientSession, name: str, arguments: dict[str, Any], message: str) -> None:
        result = await session.call_tool(name, arguments)
        said = text(result).strip()
        assert result.is_error and message in said, (name, arguments, said)
        assert "\n" not in said, said  # a crash would say only "Error executing tool NAME"

    async def body(session: ClientSession) -> None:
        for paths in (["lists/out.txt"], ["link.py"], ["linked"], [".", "lists/out.txt"]):
            await refused(session, "batch_start", {"paths": paths}, "outside the workspace")
        await refused(session, "batch_start", {"paths": ["lists/binary.txt"]}, "not UTF-8")
        await refused(session, "batch_start", {"paths": ["scale\x00relu.py"]}, "NUL byte")
        candidate = "candidates/segfault.py"
        await refused(session, "evaluate", {"task": "scale_relu\x00.py", "candidate": candidate}, "NUL byte")
        await refused(session, "evaluate", {"task": "not_utf8.py", "candidate": candidate}, "not UTF-8")
        await refused(session, "evaluate", {"task": "scale_relu.py", "candidate": "not_utf8.py"}, "not UTF-8")
        await refused(
            session, "evaluate", {"task": "link.py", "candidate": candidate}, "outside the workspace"
        )
        source = "import torch\nx = '\x00'\n"
        await refused(session, "evaluate", {"task": source, "candidate": candidate}, "NUL byte")
        await refused(session, "optimize", {"task": "not_utf8.py", "wait": False}, "not UTF-8")
        exits = {"task": "exits_at_import.py", "candidate": candidate, "trials": 2, "timing_trials": 3}
        killed = await session.call_tool("evaluate", exits)  # its code runs in the worker only
        assert killed.structured_content["status"] == "runtime_error", text(killed)
        assert (await session.call_tool("hardware", {})).is_error is False  # the server lives on
        started = await session.call_tool("batch_start", {"paths": ["lists/in.txt"], "rounds": 1})
        assert not started.is_error, text(started)
        folder = Path(started.structured_content["folder"])
        assert (folder / "tasks.txt").read_text() == f"{hostile_workspace / 'scale_relu.py'}\n"

    drive(hostile_workspace, body)


def test_a_child_log_is_read_from_its_end_however_large(tmp_path: Path) -> None:
    """A run whose task printed without end: the server reads the log's tail, not the log."""
    import tracemalloc
    from types import SimpleNamespace

    from kforge.agent.mcp.runs import Runs
    from kforge.agent.mcp.workspace import Workspace

    log = tmp_path / "child.log"
    with log.open("wb") as fh:
        fh.truncate(64 * 2**20)  # 64 MiB of printed output (sparse: no disk used)
        fh.seek(0, 2)
        fh.write(b"\nValueError: the last line says why\n")
    runs = Runs(Workspace(root=tmp_path, out=tmp_path / "out", device="cpu"))
    runs.children["run-1"] = (SimpleNamespace(poll=lambda: 1), log)  # type: ignore[assignment]
    tracemalloc.start()
    try:
        tail = runs.log_tail("run-1")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert tail == "ValueError: the last line says why"
    assert peak < 2**20, f"{peak / 2**20:.1f} MiB read for one line"


def test_a_run_started_by_a_server_that_is_killed_ends_with_its_evaluations(workspace: Path) -> None:
    """The server killed outright (its IDE client killed it, or the OOM killer): the optimize
    run it started (its own session, so no signal reaches it) ends, and its workers with it."""
    import signal
    import subprocess
    import time

    server = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time\nfrom pathlib import Path\n"
            "from kforge.agent.mcp.runs import Runs\nfrom kforge.agent.mcp.workspace import Workspace\n"
            "root = Path(sys.argv[1]).resolve()\n"
            "runs = Runs(Workspace(root=root, out=root / 'kforge-runs', device='cpu'))\n"
            "process, _ = runs._spawn(['optimize', 'scale_relu.py', '--device', 'cpu', '--rounds', '3',"
            " '--timing-trials', '3', '--out', str(root / 'kforge-runs'), '--quiet'])\n"
            "print(process.pid, flush=True)\ntime.sleep(600)\n"
        ), str(workspace)],
        stdout=subprocess.PIPE, text=True, env=os.environ.copy(),
    )  # fmt: skip
    assert server.stdout is not None
    run = int(server.stdout.readline())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(workspace.glob("kforge-runs/*/run.json")):
        time.sleep(0.2)
    server.send_signal(signal.SIGKILL)
    server.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{run}").exists():
        state = (Path(f"/proc/{run}/stat").read_text().rsplit(")", 1)[1].split() or ["?"])[0]
        if state == "Z":
            break
        time.sleep(0.5)
    else:
        assert not Path(f"/proc/{run}").exists(), "the run outlived the server that started it"


def test_optimize_model_profiles_a_model_with_progress_and_refuses_paths_outside(workspace: Path) -> None:
    shutil.copy(FIXTURES / "models" / "tiny_vit.py", workspace / "tiny_vit.py")

    async def body(session: ClientSession) -> None:
        messages: list[str] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            messages.append(message or "")

        arguments = {"spec": "tiny_vit.py:tiny", "extract_only": True, "min_share": 0.01}
        result = await session.call_tool("optimize_model", arguments, progress_callback=on_progress)
        status = result.structured_content
        assert status["state"] == "finished", status
        assert any("capturing" in m and "tiny_vit.py:tiny" in m for m in messages), messages
        assert status["summary"]["regions_found"] >= 3 and status["patch"] is None
        assert {Path(t).name.split("_", 1)[1] for t in status["tasks"]} >= {"Attention.py", "Mlp.py"}
        again = (await session.call_tool("model_status", {"model_id": status["model_id"]})).structured_content
        assert again["state"] == "finished"
        for args, message in [
            ({"spec": "../secret.py:x"}, "outside the workspace"),
            ({"spec": "tiny_vit.py:tiny", "min_share": 2.0}, "min_share"),
            ({"spec": "tiny_vit.py:tiny", "max_regions": 0}, "max_regions must be at least 1"),
            ({"spec": "tiny_vit.py:tiny", "precision": "fp8"}, "unknown precision"),
        ]:
            refused = await session.call_tool("optimize_model", args)
            assert refused.is_error and message in text(refused), text(refused)
        missing = await session.call_tool("model_status", {"model_id": "../x"})
        assert missing.is_error and "no model run" in text(missing)

    drive(workspace, body)
