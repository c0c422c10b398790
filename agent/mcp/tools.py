"""The MCP tools: each one a typed function whose docstring tells an agent when to call it.

Bad arguments raise ``ToolError`` with one line; the SDK turns it into an error result, and
the server goes on.
"""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from ...tools.evaluate import EvalError, EvalOptions, evaluate
from ...tools.hardware import detect_gpu
from ...tools.precision import PRECISIONS
from ...tools.task import TaskError, load_task
from ..report import best_step, render_report
from ..store import TrajectoryStore
from .runs import Runs, describe, read_events
from .workspace import Workspace

KINDS = ("hardware", "guide", "kernel")


def _check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ToolError(f"unknown precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    return precision


def _positive(name: str, value: int | None) -> list[str]:
    """``--name value`` for the child's command line; a ToolError for a value below 1."""
    if value is None:
        return []
    if value < 1:
        raise ToolError(f"{name} must be at least 1, not {value}")
    return [f"--{name.replace('_', '-')}", str(value)]


def register(server: MCPServer, ws: Workspace, runs: Runs) -> None:
    """Every tool of the server, in three groups."""
    _register_evaluation(server, ws, runs)
    _register_runs(server, ws, runs)
    _register_run_views(server, ws, runs)
    _register_search_and_batch(server, ws, runs)
    _register_model(server, ws, runs)


def _register_evaluation(server: MCPServer, ws: Workspace, runs: Runs) -> None:
    """The hardware, and one candidate's evaluation."""

    @server.tool()
    def hardware() -> dict[str, Any]:
        """The detected CUDA GPU and its spec (SMs, L2, memory bandwidth, peak TFLOP/s), or
        {"gpu": null} when there is none (kforge then verifies and times on the CPU)."""
        gpu = detect_gpu()
        return gpu.to_json() if gpu else {"gpu": None}

    @server.tool(name="evaluate")
    async def evaluate_candidate(
        task: str,
        candidate: str,
        precision: str = "fp32",
        trials: int = 3,
        timing_trials: int = 20,
        compile_baseline: bool = False,
        timeout_s: float = 300.0,
    ) -> dict[str, Any]:
        """Verify a candidate against a task and time both, in a sandboxed worker.

        task: a KernelBench-format file (class Model, get_inputs, get_init_inputs) as a path in
        the workspace or as source text. candidate: a file or source defining class ModelNew.
        Returns the Result: status (ok, incorrect, rejected for a detected cheat, compile_error,
        runtime_error, timeout, format_error), errors, timings in ms and speedups vs eager
        (and vs torch.compile when compile_baseline is true), and the log when it failed."""
        task_path = ws.source_file(task, what="task")
        candidate_path = ws.source_file(candidate, what="candidate")
        if trials < 1 or timing_trials < 1 or timeout_s <= 0:
            raise ToolError("trials, timing_trials and timeout_s must be positive")
        options = EvalOptions(
            device=ws.device, precision=_check_precision(precision), trials=trials,
            timing_trials=timing_trials, timeout_s=timeout_s, compile_baseline=compile_baseline,
            cache_dir=ws.out / "cache",
        )  # fmt: skip
        try:
            loaded = load_task(task_path, check_import=False)  # the task's code runs in the worker only
            result = await anyio.to_thread.run_sync(evaluate, loaded, candidate_path.read_text(), options)
        except (TaskError, EvalError) as err:
            raise ToolError(str(err).strip().splitlines()[0]) from None
        return result.to_json()


def _register_runs(server: MCPServer, ws: Workspace, runs: Runs) -> None:
    """optimize: start or resume a run, with progress."""

    @server.tool()
    async def optimize(
        ctx: Context,
        task: str | None = None,
        resume: str | None = None,
        rounds: int | None = 2,
        candidates: int | None = 3,
        precision: str | None = None,
        timing_trials: int | None = None,
        wait: bool = True,
    ) -> dict[str, Any]:
        """Optimize a task: propose, verify and time faster replacements, round after round.

        task: a KernelBench-format file in the workspace, or its source text. resume: the id of
        an interrupted or failed run to continue instead (then task and the other settings are
        the run's own). With wait (the default) the call sends a progress notification per
        event and returns the run's status when it ends; cancelling the call stops the run,
        which stays resumable. With wait=false it returns the run id at once: poll run_status,
        then get_best and get_report."""
        task_path = ws.source_file(task, what="task") if task is not None and resume is None else None
        flags = (
            [] if resume is not None else _positive("rounds", rounds) + _positive("candidates", candidates)
        )
        flags += _positive("timing_trials", timing_trials)
        if precision is not None and resume is None:
            flags += ["--precision", _check_precision(precision)]
        seen = len(read_events(runs.run_folder(resume))) if resume is not None else 0  # from before
        run_id = await runs.start_optimize(task_path, resume, flags)
        if not wait:
            return runs.status(run_id)

        async def report(n: int, event: dict[str, Any]) -> None:
            await ctx.report_progress(n, None, f"{run_id}: {describe(event)}")

        try:
            await runs.follow(run_id, report, seen)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(runs.stop, run_id)
            raise
        return runs.status(run_id)


def _register_run_views(server: MCPServer, ws: Workspace, runs: Runs) -> None:
    """What a run left: its status, report and best candidate."""

    @server.tool()
    def run_status(run_id: str) -> dict[str, Any]:
        """Where a run stands: state (running, finished, failed, interrupted), whether it can be
        resumed (optimize with resume=run_id), candidates evaluated, best speedup so far."""
        return runs.status(run_id)

    @server.tool()
    def get_report(run_id: str) -> str:
        """The run's report in Markdown: every attempt with its result, and the analyses."""
        runs.run_folder(run_id)
        return render_report(TrajectoryStore(runs.runs_dir / run_id / "trajectories.db"), run_id)

    @server.tool()
    def get_best(run_id: str) -> dict[str, Any]:
        """The fastest verified candidate of a run: its source (a drop-in ModelNew) and its
        measured Result. An error when no candidate has been verified yet."""
        runs.run_folder(run_id)
        store = TrajectoryStore(runs.runs_dir / run_id / "trajectories.db")
        step = best_step([s for t in store.trajectories(run_id) for s in t.steps])
        if step is None or step.result is None:
            raise ToolError(f"run {run_id} has no verified candidate yet: see run_status or get_report")
        return {
            "attempt_id": step.attempt.attempt_id,
            "source": step.attempt.source,
            "result": step.result.to_json(),
        }


def _register_search_and_batch(server: MCPServer, ws: Workspace, runs: Runs) -> None:
    """retrieval, and batches of tasks."""

    @server.tool()
    async def search_docs(
        query: str, kind: str | None = None, gpu: str | None = None, k: int = 5
    ) -> list[dict[str, Any]]:
        """Search kforge's corpus (hardware sheets, optimization guides, measured kernels).
        kind: hardware, guide or kernel; gpu: keep what is about this GPU (e.g. H100-SXM)."""
        if kind is not None and kind not in KINDS:
            raise ToolError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        if k < 1:
            raise ToolError(f"k must be at least 1, not {k}")
        return await anyio.to_thread.run_sync(_search, query, kind, gpu, k)

    @server.tool()
    def batch_start(
        paths: list[str],
        rounds: int = 1,
        candidates: int = 2,
        timing_trials: int | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """Optimize many tasks in the background: paths are task files, task folders, list
        files or a KernelBench checkout in the workspace; every task file they select must lie
        in the workspace too. Returns the batch's status (its id for batch_status) and notes
        on task ids (task files of the same name run as name@source-hash)."""
        if not paths:
            raise ToolError("give at least one task path")
        flags = _positive("rounds", rounds) + _positive("candidates", candidates)
        flags += _positive("timing_trials", timing_trials)
        _positive("limit", limit)  # applied here, to the tasks the server checked
        entries, notes = ws.batch_tasks(paths, limit)
        batch_id = runs.start_batch([entry.path for entry in entries], flags)
        return runs.batch_status(batch_id) | {"notes": notes}

    @server.tool()
    def batch_status(batch_id: str) -> dict[str, Any]:
        """A batch's state, its per-task results so far, and its summary once it has finished."""
        return runs.batch_status(batch_id)


def _model_flags(
    precision: str, rounds: int | None, min_share: float, max_regions: int | None, extract_only: bool
) -> list[str]:
    """``kforge model``'s flags for optimize_model's arguments; a ToolError for a bad one."""
    if not 0 <= min_share < 1:
        raise ToolError("min_share must be in [0, 1)")
    flags = _positive("rounds", rounds) + _positive("max_regions", max_regions)
    flags += ["--precision", _check_precision(precision), "--min-share", str(min_share)]
    return flags + (["--extract-only"] if extract_only else [])


def _register_model(server: MCPServer, ws: Workspace, runs: Runs) -> None:
    """optimize_model and model_status: the user's own model, end to end."""

    @server.tool()
    async def optimize_model(
        ctx: Context,
        spec: str,
        precision: str = "fp32",
        rounds: int | None = 6,
        min_share: float = 0.02,
        max_regions: int | None = None,
        extract_only: bool = False,
        wait: bool = True,
    ) -> dict[str, Any]:
        """Make a whole PyTorch model faster, end to end. spec: FILE.py:factory in the workspace,
        where factory() returns (model, example_inputs), or FILE.py defining get_model() and
        get_inputs(). kforge profiles the model, writes its hot regions (attention, MLP, norms,
        conv blocks) as tasks, optimizes them, and measures the patched model against eager and
        torch.compile; the patch (kforge_patch.py, applied with kforge.apply(model, path)) keeps
        only regions whose win survives in the model. max_regions: at most this many regions get
        tasks, the largest shares first. extract_only: profile the model and write
        the region tasks (optimize or evaluate them yourself), nothing more. With wait (the default) the call sends a
        progress notification per step and returns the status when it ends; with wait=false it
        returns the id at once: poll model_status."""
        file, colon, factory = spec.partition(":")
        path = ws.existing_file(file, what="model file")
        if path.suffix != ".py":
            raise ToolError(f"{spec}: give FILE.py:factory or FILE.py")
        flags = _model_flags(precision, rounds, min_share, max_regions, extract_only)
        model_id = runs.start_model(f"{path}{colon}{factory}", flags)
        if not wait:
            return runs.model_status(model_id)
        seen = 0
        try:
            while True:
                running = runs.alive(model_id)
                for event in read_events(runs.model_folder(model_id), seen):
                    seen += 1
                    await ctx.report_progress(seen, None, f"{model_id}: {describe(event)}")
                if not running:
                    break
                await anyio.sleep(0.25)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(runs.stop, model_id)
            raise
        return runs.model_status(model_id)

    @server.tool()
    def model_status(model_id: str) -> dict[str, Any]:
        """A model run's state, its last progress lines, and once finished its summary (end-to-end
        times of eager, torch.compile and the patch), the patch file and the HTML report."""
        return runs.model_status(model_id)


def _search(query: str, kind: str | None, gpu: str | None, k: int) -> list[dict[str, Any]]:
    try:
        from ...retrieval import RetrievalError, Store, gpu_filter
        from ...retrieval.corpus import corpus_chunks, load_documents
    except ModuleNotFoundError as err:
        raise ToolError(f"search_docs needs {err.name}: pip install kforge with its dependencies") from None
    try:
        where = gpu_filter(gpu) if gpu else None
        store = Store()
        if store.count() == 0:  # first use on this machine: embed the shipped corpus
            store.index(corpus_chunks(load_documents()))
        hits = store.search(query, k=k, kinds=[kind] if kind else KINDS, where=where)
    except (RetrievalError, ValueError) as err:
        raise ToolError(str(err).strip().splitlines()[0]) from None
    return [hit.to_json() for hit in hits]
