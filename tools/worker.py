"""Worker entry point: ``python -P -m kforge.tools.worker --result-fd N JOB.json`` (or
``--wait`` instead of the job path, for a worker started ahead of its job: it imports torch
and the runner, then reads the job's path from stdin).

A job's ``role`` says which side it is:

- ``judge``: the reference worker of an evaluation (:mod:`.judge`): imports the task, never
  the candidate, talks to the candidate worker over two pipes and writes the Result to
  ``--result-fd``, a pipe only kforge holds the other end of;
- ``candidate``: the candidate worker (:mod:`.candidate_worker`): imports the candidate,
  never the task, and answers the judge; it writes no result at all;
- ``single``: baseline, compile and forward jobs, which run no candidate beside a judge.

``-P`` keeps the working folder (the job's, which a candidate may write) off ``sys.path``,
so kforge's own modules are never loaded from there. A worker that dies, hangs or is killed
leaves no result; kforge reports that with the worker's log.
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

MAX_RESULT = 1 << 24  # bytes of Result JSON kforge reads back


def main(job_path: str, result_fd: int) -> int:
    """Contain this process, then run the job; with KFORGE_PROFILE_WORKER=DIR set, also write a
    cProfile summary of the worker (where its time goes) to DIR."""
    spec: dict[str, Any] = json.loads(Path(job_path).read_text())
    spec["containment"] = contain(spec, Path(job_path).parent)
    profile_dir = os.environ.get("KFORGE_PROFILE_WORKER")
    if not profile_dir:
        return run(spec, result_fd)
    profiler = cProfile.Profile()
    code = profiler.runcall(run, spec, result_fd)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(60)
    stats.sort_stats("tottime").print_stats(25)
    Path(profile_dir).mkdir(parents=True, exist_ok=True)
    (Path(profile_dir) / f"{Path(job_path).parent.name}.txt").write_text(out.getvalue())
    return code


def contain(spec: dict[str, Any], folder: Path) -> list[str]:
    """The OS layers (:mod:`.contain`), applied before torch (which starts threads Landlock
    would miss) and before any task or candidate code: this worker writes only its job
    folder and the folders the job names. Returns one line per layer, active or missing."""
    from .contain import Policy, default_readable, enter

    tmp = folder / "tmp"
    tmp.mkdir(exist_ok=True)
    os.environ["TMPDIR"] = str(tmp)  # import torch needs a temporary folder
    os.environ["HOME"] = str(folder)  # tools that write under ~ write here
    writable = (str(folder), *spec.get("writable", ()))
    profile_dir = os.environ.get("KFORGE_PROFILE_WORKER")
    if profile_dir:  # where the cProfile summary goes (main)
        Path(profile_dir).mkdir(parents=True, exist_ok=True)
        writable += (profile_dir,)
    readable = default_readable() + tuple(spec.get("readable", ()))
    lines = enter(Policy(writable=writable, readable=readable))
    for line in lines:
        print(f"containment: {line}", flush=True)
    return lines


def run(spec: dict[str, Any], result_fd: int) -> int:
    from . import runner  # imports torch: after the job is read, so a bad job fails fast

    role, mode = spec.get("role", "single"), spec["mode"]
    if role == "candidate":
        from . import candidate_worker

        candidate_worker.run(_channel(spec), spec, runner.load_candidate)
        return 0
    if role == "judge":
        from . import judge

        payload = judge.run_eval(spec, _channel(spec)).to_json()
    elif mode == "compile":
        payload = runner.run_compile(spec)
    elif mode == "baseline":
        payload = runner.run_baseline(spec).to_json()
    elif mode == "check":
        from .task import check_module_here

        payload = {"error": check_module_here(Path(spec["task_path"]), spec["label"])}
    elif mode in ("model-extract", "model-measure"):
        from .model import job as model_job

        payload = model_job.run(spec)
    elif mode == "forward":
        runner.run_forward(spec)
        payload = {"status": "ok"}
    else:
        raise SystemExit(f"unknown worker mode {mode!r}")
    with os.fdopen(result_fd, "wb") as out:
        out.write(json.dumps(payload).encode())
    return 0


def _channel(spec: dict[str, Any]) -> Any:
    from .wire import Channel

    reader = os.fdopen(int(spec["read_fd"]), "rb", buffering=1 << 20)
    writer = os.fdopen(int(spec["write_fd"]), "wb", buffering=1 << 20)
    shared = spec.get("shared_fd")
    return Channel(
        reader,
        writer,
        max_bytes=int(spec.get("max_message_bytes", 1 << 40)),
        shared=None if shared is None else int(shared),
    )


def wait_for_job(result_fd: int) -> int:
    from . import runner  # noqa: F401  (the imports are what starting ahead saves)

    line = sys.stdin.readline().strip()
    if not line:
        return 0  # the parent went away without a job
    os.chdir(Path(line).parent)
    return main(line, result_fd)


if __name__ == "__main__":
    args = sys.argv[1:]
    fd = -1
    if args[:1] == ["--result-fd"]:
        fd, args = int(args[1]), args[2:]
    sys.exit(wait_for_job(fd) if args[0] == "--wait" else main(args[0], fd))
