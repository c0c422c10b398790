"""Worker entry point: ``python -m kforge.tools.worker JOB.json``, or ``--wait`` for a
worker started ahead of its job: it imports torch and the runner, then reads the job's path
from stdin (nothing: it exits) and runs in the job's folder.

Reads one job, runs it, and writes ``result.json`` beside the job. Anything that kills
the process (a segfault, an illegal memory access, the time limit) leaves no result, and
the parent reports that with this process's log.
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import sys
from pathlib import Path
from typing import Any

from .sandbox import RESULT_FILE


def main(job_path: str) -> int:
    """Run the job; with KFORGE_PROFILE_WORKER=DIR set, also write a cProfile summary of the
    worker (where its time goes) to DIR."""
    profile_dir = os.environ.get("KFORGE_PROFILE_WORKER")
    if not profile_dir:
        return run(job_path)
    profiler = cProfile.Profile()
    code = profiler.runcall(run, job_path)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(60)
    stats.sort_stats("tottime").print_stats(25)
    Path(profile_dir).mkdir(parents=True, exist_ok=True)
    (Path(profile_dir) / f"{Path(job_path).parent.name}.txt").write_text(out.getvalue())
    return code


def run(job_path: str) -> int:
    spec: dict[str, Any] = json.loads(Path(job_path).read_text())
    from . import runner  # imports torch: after the job is read, so a bad job fails fast

    mode = spec["mode"]
    if mode == "compile":
        payload = runner.run_compile(spec)
    elif mode == "eval":
        payload = runner.run_eval(spec).to_json()
    elif mode == "baseline":
        payload = runner.run_baseline(spec).to_json()
    elif mode == "forward":
        runner.run_forward(spec)
        payload = {"status": "ok"}
    else:
        raise SystemExit(f"unknown worker mode {mode!r}")
    out = Path(job_path).with_name(RESULT_FILE)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, out)
    return 0


def wait_for_job() -> int:
    from . import runner  # noqa: F401  (the imports are what starting ahead saves)

    line = sys.stdin.readline().strip()
    if not line:
        return 0  # the parent went away without a job
    os.chdir(Path(line).parent)
    return main(line)


if __name__ == "__main__":
    sys.exit(wait_for_job() if sys.argv[1] == "--wait" else main(sys.argv[1]))
