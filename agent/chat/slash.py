"""The slash commands. Each is a function of the session and the rest of the line; its
docstring's first line is its ``/help`` text. Bad input raises ChatError (one line)."""

from __future__ import annotations

import dataclasses
import difflib
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

from rich.markdown import Markdown
from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from ...tools.precision import PRECISIONS
from ...tools.result import Result
from ..policy.ranker_data import split_features
from ..report import render_report
from ..run import RunStopped
from ..tables import result_table
from .session import ChatError, Session


class Quit(Exception):
    """/quit: leave the session (everything is already saved)."""


Command = Callable[[Session, str], None]


def _one(arg: str, usage: str) -> str:
    words = arg.split()
    if len(words) != 1:
        raise ChatError(f"usage: {usage}")
    return words[0]


def task_cmd(s: Session, arg: str) -> None:
    """/task FILE: load a KernelBench-format task (no FILE: paste the module, Esc Enter to end)."""
    if arg.strip():
        path = Path(arg.strip()).expanduser()
    else:
        from prompt_toolkit import prompt

        pasted = prompt("module> ", multiline=True)
        path = Path(tempfile.mkdtemp(prefix="kforge-pasted-")) / "pasted_task.py"
        path.write_text(pasted)
    if not path.is_file():
        raise ChatError(f"{path}: no such file")
    task = s.load(path)
    s.console.print(
        f"loaded [bold]{escape(task.name)}[/] -> {escape(str(s.run_dir))} (/run to start, /plan after)"
    )


def plan_cmd(s: Session, arg: str) -> None:
    """/plan: show the current plan (/run asks you to approve or edit each new plan)."""
    s.console.print(Markdown(split_features(s.plan())[0]))


def run_cmd(s: Session, arg: str) -> None:
    """/run [ROUNDS]: run ROUNDS more rounds (default --rounds), or finish the round that was stopped."""
    if arg.strip() and not arg.strip().isdigit():
        raise ChatError("usage: /run [ROUNDS] (a whole number)")
    try:
        summary = s.run(int(arg) if arg.strip() else None)
    except (KeyboardInterrupt, RunStopped):
        s.console.print("[yellow]stopped[/]: /run continues where it stopped, /attempts shows what landed")
        return
    if summary.status == "failed":
        s.console.print(f"[red]error:[/] {escape(summary.reason)} (/run to retry)")


def stop_cmd(s: Session, arg: str) -> None:
    """/stop (or Ctrl-C) while a round runs: stop it; landed results are kept and never re-run, the candidate in flight is evaluated once by the next /run."""
    s.console.print("no round is running: /run starts one")


def pick_cmd(s: Session, arg: str) -> None:
    """/pick ID: the next round builds on this attempt instead of the best (an LLM gets its code, the embedded policy tunes its strategy)."""
    attempt_id = _one(arg, "/pick ID (see /attempts)")
    s.pick(attempt_id)
    s.console.print(f"the next round builds on {escape(attempt_id)} (/run to start it)")


def choose_cmd(s: Session, arg: str) -> None:
    """/choose [on|off]: show or set whether /run stops after each round that goes on, for you to choose what the next builds on."""
    if arg.strip():
        if arg.strip() not in ("on", "off"):
            raise ChatError("usage: /choose [on|off]")
        s.settings = s.settings.replace(choose=arg.strip() == "on")
    s.console.print(f"choose {'on' if s.settings.choose else 'off'}")


def attempts_cmd(s: Session, arg: str) -> None:
    """/attempts: every attempt of this run with its status and speedup."""
    table = Table("id", "strategy", "status", "speedup", "ms")
    for step in s.steps():
        r = step.result
        speed = f"{r.speedup_vs_eager:.2f}x" if r and r.speedup_vs_eager is not None else "-"
        ms = f"{r.candidate_ms:.4g}" if r and r.candidate_ms is not None else "-"
        status = r.status.value if r else "not evaluated"
        table.add_row(Text(step.attempt.attempt_id), Text(step.attempt.strategy), Text(status), speed, ms)
    s.console.print(table if table.rows else "no attempts yet: /run first")


def _result_of(s: Session, attempt_id: str) -> Result:
    result = s.step(attempt_id).result
    if result is None:
        raise ChatError(f"{attempt_id} was not evaluated yet: /run continues the round")
    return result


def show_cmd(s: Session, arg: str) -> None:
    """/show ID: an attempt's source (highlighted) and its result."""
    attempt_id = _one(arg, "/show ID (see /attempts)")
    step = s.step(attempt_id)
    s.console.print(Syntax(step.attempt.source or step.attempt.error, "python", line_numbers=True))
    if step.result is not None:
        s.console.print(result_table(s.task.name if s.task else "", attempt_id, step.result))


def diff_cmd(s: Session, arg: str) -> None:
    """/diff A B: the unified diff between two attempts' sources ("task" is the reference)."""
    ids = arg.split()
    if len(ids) != 2:
        raise ChatError("usage: /diff A B (attempt ids from /attempts, or task)")
    a, b = (s.source(i).splitlines(keepends=True) for i in ids)
    text = "".join(difflib.unified_diff(a, b, fromfile=ids[0], tofile=ids[1]))
    s.console.print(Syntax(text, "diff") if text else Text(f"{ids[0]} and {ids[1]} are the same"))


def profile_cmd(s: Session, arg: str) -> None:
    """/profile ID: timings, roofline and Nsight Compute figures (ncu where a GPU has it)."""
    attempt_id = _one(arg, "/profile ID")
    result = _result_of(s, attempt_id)
    roofline = dataclasses.asdict(result.roofline) if result.roofline else None
    s.console.print(Text(json.dumps(result.headline() | {"roofline": roofline, "ncu": result.ncu}, indent=2)))
    if result.roofline is None:
        s.console.print("no roofline figures (measured on the CPU, or the task's FLOPs are unknown)")
    if result.ncu is None:
        s.console.print("no ncu metrics (needs a GPU with Nsight Compute)")


def eval_cmd(s: Session, arg: str) -> None:
    """/eval FILE: verify and time your own candidate (a file defining ModelNew); it joins the run's attempts."""
    path = Path(_one(arg, "/eval FILE")).expanduser()
    step = s.evaluate_file(path)
    attempt_id = step.attempt.attempt_id
    if step.result is not None:
        s.console.print(result_table(s.task.name if s.task else "", attempt_id, step.result))
    s.console.print(Text(f"recorded as {attempt_id} (/attempts, /pick {attempt_id})"))


def search_cmd(s: Session, arg: str) -> None:
    """/search QUERY: search the retrieval store (docs, hardware sheets, prior kernels)."""
    if not arg.strip():
        raise ChatError("usage: /search QUERY")
    hits = s.search(arg.strip())
    for hit in hits:
        first = next((ln for ln in hit.text.splitlines()[1:] if ln.strip()), "")
        s.console.print(
            f"[bold]{escape(hit.id)}[/]  [dim]{escape(hit.kind)} score {hit.score:.3f}[/]\n  {escape(first[:160])}"
        )
    if not hits:
        s.console.print("no results")


def hw_cmd(s: Session, arg: str) -> None:
    """/hw: the GPU runs are measured on (or the CPU)."""
    from ...tools.hardware import detect_gpu

    spec = detect_gpu() if s.settings.device == "cuda" else None
    if spec is None:
        s.console.print("device: cpu (timed by wall clock)")
        return
    s.console.print(Text(json.dumps(dataclasses.asdict(spec), indent=2, default=str)))


def model_cmd(s: Session, arg: str) -> None:
    """/model SPEC: make a whole model faster end to end (FILE.py:factory returning (model, inputs)); a patch and a report."""
    spec = _one(
        arg, "/model FILE.py:factory (or FILE.py with get_model and get_inputs); the LLM is /llm NAME"
    )
    from ..model.run import ModelOptions, ModelRunError, optimize_model

    name = Path(spec.partition(":")[0]).stem + (
        "-" + spec.partition(":")[2] if spec.partition(":")[2] else ""
    )
    out = Path(s.settings.out).parent / "kforge-models" / name
    options = ModelOptions(spec=spec, out=out, settings=s.settings.replace(out=out / "batch" / "runs"))
    try:
        optimize_model(options, say=s.console.print)
    except ModelRunError as err:
        raise ChatError(str(err).splitlines()[0]) from None


def llm_cmd(s: Session, arg: str) -> None:
    """/llm [NAME]: show or set the LLM (the next /run and free text use it)."""
    if arg.strip():
        s.settings = s.settings.replace(model=arg.strip())
    where = s.settings.base_url or ("the default OpenAI endpoint" if s.settings.api_key else "none")
    s.console.print(Text(f"model {s.settings.model or '-'} at {where}"))


def precision_cmd(s: Session, arg: str) -> None:
    """/precision [CLASS]: show or set the precision class candidates are checked under."""
    if arg.strip():
        if arg.strip() not in PRECISIONS:
            raise ChatError(f"unknown precision {arg.strip()!r}: choose one of {', '.join(PRECISIONS)}")
        s.settings = s.settings.replace(precision=arg.strip())
    s.console.print(f"precision {s.settings.precision}")


def save_cmd(s: Session, arg: str) -> None:
    """/save PATH: write the best verified candidate to PATH."""
    path = Path(_one(arg, "/save PATH")).expanduser()
    best = s.best()
    path.write_text(best.attempt.source)
    speed = best.result.speedup_vs_eager if best.result else None
    s.console.print(Text(f"saved {best.attempt.attempt_id} ({speed or 0:.2f}x vs eager) to {path}"))


def report_cmd(s: Session, arg: str) -> None:
    """/report: the run's report (every attempt, the analyses)."""
    run_id = s.run_id or ""
    s.console.print(Markdown(render_report(s.store, run_id)))


def help_cmd(s: Session, arg: str) -> None:
    """/help: this list."""
    for func in COMMANDS.values():
        s.console.print((func.__doc__ or "").splitlines()[0], highlight=False, markup=False)
    s.console.print(
        "free text goes to the LLM (configured with --base-url/--model), which can call these tools"
    )


def quit_cmd(s: Session, arg: str) -> None:
    """/quit: leave (the session is saved; kforge chat --resume RUN continues it)."""
    raise Quit


COMMANDS: dict[str, Command] = {
    "help": help_cmd, "task": task_cmd, "plan": plan_cmd, "run": run_cmd, "stop": stop_cmd,
    "attempts": attempts_cmd, "show": show_cmd, "diff": diff_cmd, "profile": profile_cmd,
    "pick": pick_cmd, "choose": choose_cmd, "eval": eval_cmd, "search": search_cmd,
    "hw": hw_cmd, "model": model_cmd, "llm": llm_cmd, "precision": precision_cmd, "save": save_cmd, "report": report_cmd,
    "quit": quit_cmd,
}  # fmt: skip


def dispatch(s: Session, line: str) -> None:
    name, _, arg = line.strip().removeprefix("/").partition(" ")
    command = COMMANDS.get(name)
    if command is None:
        raise ChatError(f"unknown command /{name}: /help lists the commands")
    command(s, arg)
