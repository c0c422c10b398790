"""Text written by a hostile task, candidate, worker or LLM (rich markup such as ``[/bold]``,
HTML such as ``<script>``) is shown as text: the CLI table, the progress lines, the chat's
tables, report.md and report.html never read it as markup, and help texts keep their brackets."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import click
import typer
from kforge.agent.cli import app
from kforge.agent.events import CandidateEvaluated, Decision, RichRenderer, RunFinished, RunStarted
from kforge.agent.mcp.runs import describe
from kforge.agent.report import render_report
from kforge.agent.report.run import render_run
from kforge.agent.store import AttemptRecord, TrajectoryStore
from kforge.tools.result import Result, Status
from kforge.tools.task import Task
from rich.console import Console
from rich.text import Text
from typer.testing import CliRunner

FIXTURES = Path(__file__).parent / "fixtures"
MARKUP = "[/bold] [link=javascript:alert(1)]x[/link]"
SCRIPT = "<script>alert(1)</script>"
HOSTILE = f"{MARKUP} {SCRIPT}"


def hostile_result() -> Result:
    return Result(
        status=Status.REJECTED, backend=f"triton{MARKUP}", device="cpu", cheats=[f"cached output {HOSTILE}"],
        flags=[f"note {HOSTILE}"], log=f"Traceback\nRuntimeError: {HOSTILE}",
    )  # fmt: skip


def test_eval_prints_a_result_whose_log_and_cheats_hold_markup_and_html(tmp_path, monkeypatch):
    import kforge.tools.evaluate as engine

    task = tmp_path / "relu[blink].py"  # the task's name is its file name: chosen by its author
    shutil.copy(FIXTURES / "tasks" / "scale_relu.py", task)
    candidate = tmp_path / "cand[i].py"
    candidate.write_text("class ModelNew: pass\n")
    monkeypatch.setattr(engine, "evaluate", lambda *args, **kwargs: hostile_result())
    done = CliRunner().invoke(
        app, ["eval", str(task), str(candidate), "--device", "cpu"], env={"COLUMNS": "400"}
    )
    assert done.exit_code == 3, done.output  # rejected
    assert "MarkupError" not in done.output
    for shown in (MARKUP, SCRIPT, "relu[blink]", "cand[i].py", f"triton{MARKUP}"):
        assert shown in done.output, shown


def test_progress_lines_show_names_reasons_and_statuses_as_text():
    out = io.StringIO()
    renderer = RichRenderer(Console(file=out, width=400))
    events = [
        RunStarted(task=f"t{MARKUP}", run_dir=f"/runs/{MARKUP}", policy="embedded", resumed=False),
        CandidateEvaluated(attempt_id=f"r1{MARKUP}", status=HOSTILE, speedup_vs_eager=None, candidate_ms=None,
                           reused=False),
        Decision(round=1, decision="stop", reason=HOSTILE, best_attempt_id=MARKUP, best_speedup=None),
        RunFinished(run_dir=MARKUP, best_attempt_id=MARKUP, best_speedup=0.5, reason=HOSTILE),
    ]  # fmt: skip
    for event in events:
        renderer(event)
        assert HOSTILE in describe(event.to_json()) or MARKUP in describe(event.to_json())
    assert out.getvalue().count(MARKUP) >= 7 and SCRIPT in out.getvalue()


def test_chat_attempt_table_shows_hostile_ids_and_strategies(monkeypatch):
    from kforge.agent.chat.slash import attempts_cmd, profile_cmd
    from kforge.agent.store import TrajectoryStep

    out = io.StringIO()
    step = TrajectoryStep(AttemptRecord(f"r1{MARKUP}", 1, 0, "x = 1", HOSTILE), hostile_result())
    session = SimpleNamespace(console=Console(file=out, width=400), steps=lambda: [step], step=lambda _: step)
    attempts_cmd(session, "")  # type: ignore[arg-type]
    profile_cmd(session, "r1")  # type: ignore[arg-type]
    assert f"r1{MARKUP}" in out.getvalue() and HOSTILE in out.getvalue()


def _hostile_run(folder: Path) -> tuple[TrajectoryStore, str]:
    """A run folder whose task name, strategy, analysis, log and cheats are hostile."""
    (folder / "task").mkdir(parents=True)
    source = (FIXTURES / "tasks" / "scale_relu.py").read_text()
    (folder / "task" / "t.py").write_text(source)
    run_id = f"{SCRIPT}-run"
    (folder / "run.json").write_text(json.dumps({"run_id": run_id, "task": "task/t.py", "settings": {}}))
    store = TrajectoryStore(folder / "trajectories.db")
    task = Task(name=f"{SCRIPT}|`x`", path=folder / "task" / "t.py", source=source)
    store.start_run(run_id, task, policy="embedded", model=None, settings={})
    attempt = AttemptRecord("r1-c0", 1, 0, "class ModelNew:\n    pass\n", f"s{HOSTILE}", analysis=HOSTILE,
                            plan="```\n" + SCRIPT)  # fmt: skip
    store.add_attempt(run_id, task.hash, attempt)
    store.add_result(run_id, "r1-c0", hostile_result())
    store.add_analysis(run_id, 1, "critic", SCRIPT)
    store.finish_run(run_id, "finished", f"done {SCRIPT}")
    return store, run_id


def _outside_fences(markdown: str) -> str:
    return re.sub(r"^(`{3,})[^\n]*\n.*?^\1$", "", markdown, flags=re.S | re.M)


def test_report_markdown_and_html_escape_task_names_logs_and_cheats(tmp_path):
    store, run_id = _hostile_run(tmp_path / "run")
    markdown = render_report(store, run_id)
    assert "<script>" not in markdown  # log, cheats, analysis, plan, task name, run id
    assert "&lt;script&gt;" in markdown
    assert markdown.count("&lt;script&gt;") >= 6
    assert "<" not in _outside_fences(markdown).replace("<details>", "").replace("<summary>", "").replace(
        "</summary>", ""
    ).replace("</details>", "")
    assert "| r1-c0 | s\\[/bold\\]" in markdown  # a strategy cannot open a link or break the table
    page = render_run(tmp_path / "run")
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    store.close()


def _help_texts(command: click.Command, path: str = "") -> list[tuple[str, str]]:
    texts = [(path, command.help or "")]
    texts += [(f"{path} {p.name}", p.help) for p in command.params if getattr(p, "help", None)]
    for name, sub in getattr(command, "commands", {}).items():
        texts += _help_texts(sub, f"{path} {name}")
    return texts


def test_help_texts_keep_their_brackets():
    done = CliRunner().invoke(app, ["batch", "--help"], env={"COLUMNS": "300"})
    assert "pip install 'kforge[ray]'" in done.output
    for where, text in _help_texts(typer.main.get_command(app)):
        shown = Text.from_markup(text).plain  # what typer's rich help shows
        assert shown == text.replace("\\[", "["), (where, text, shown)
