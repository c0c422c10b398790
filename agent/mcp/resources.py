"""The MCP resources (runs and their reports, the corpus documents, the detected GPU's
hardware sheet) and the "make this module faster" prompt."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.mcpserver.resources import FileResource

from ...tools.hardware import detect_gpu
from ..report import render_report
from ..store import TrajectoryStore
from .runs import Runs

CORPUS_FOLDERS = ("guides", "hardware")


def register(server: MCPServer, runs: Runs) -> None:
    corpus = Path(str(resources.files("kforge.corpus")))
    for folder in CORPUS_FOLDERS:
        for path in sorted((corpus / folder).glob("*.md")):
            server.add_resource(
                FileResource(
                    uri=f"kforge://corpus/{folder}/{path.name}",
                    name=f"{folder}/{path.stem}",
                    description=f"kforge corpus: {folder[:-1]} {path.stem}",
                    mime_type="text/markdown",
                    path=path,
                )  # fmt: skip
            )

    @server.resource("kforge://hardware", mime_type="text/markdown")
    def hardware_sheet() -> str:
        """The hardware sheet of the detected GPU (peaks, memory, what to tune for)."""
        gpu = detect_gpu()
        if gpu is None:
            return "No CUDA GPU detected: kforge verifies candidates on the CPU and labels CPU timings."
        sheet = corpus / "hardware" / f"{gpu.canonical}.md"
        if gpu.canonical and sheet.is_file():
            return sheet.read_text()
        return f"# {gpu.name}\n\nNot in kforge's spec table; detected facts:\n\n{json.dumps(gpu.to_json(), indent=2)}"

    @server.resource("kforge://runs", mime_type="application/json")
    def run_list() -> str:
        """Every run under the server's output folder with its state and best speedup."""
        folders = sorted(runs.runs_dir.glob("*/run.json")) if runs.runs_dir.is_dir() else []
        return json.dumps([runs.status(p.parent.name) for p in folders], indent=2)

    @server.resource("kforge://runs/{run_id}/report", mime_type="text/markdown")
    def run_report(run_id: str) -> str:
        """A run's report: every attempt with its result, and the analyses."""
        folder = runs.runs_dir / run_id
        if Path(run_id).name != run_id or not (folder / "trajectories.db").is_file():
            raise ResourceError(f"no run {run_id}")
        return render_report(TrajectoryStore(folder / "trajectories.db"), run_id)

    @server.resource("kforge://runs/{run_id}/best", mime_type="text/x-python")
    def run_best(run_id: str) -> str:
        """A finished run's best.py: its fastest verified candidate."""
        best = runs.runs_dir / run_id / "best.py"
        if Path(run_id).name != run_id or not best.is_file():
            raise ResourceError(f"run {run_id} has no best.py (not finished, or nothing verified)")
        return best.read_text()

    @server.prompt(name="make_faster", title="Make this module faster")
    def make_faster(path: str) -> str:
        """Ask the agent to have kforge write, verify and measure a faster version of a module."""
        return (
            f"Make the PyTorch module in {path} faster on this machine's GPU with kforge.\n"
            "1. If the file is not in KernelBench format (class Model, get_inputs(), get_init_inputs(), "
            "module-level sizes), write such a task file next to it with realistic input sizes.\n"
            "2. Call the kforge `hardware` tool, then `optimize` with the task file.\n"
            "3. Call `get_best` on the run: show the measured speedup vs eager and torch.compile, and "
            "the precision class it was verified under.\n"
            "4. Only if it is verified and faster, offer to replace the module with ModelNew from the "
            "best source; otherwise say the original stays."
        )
