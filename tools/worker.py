"""Worker entry point: ``python -m kforge.tools.worker JOB.json``.

Reads one job, runs it, and writes ``result.json`` beside the job. Anything that kills
the process (a segfault, an illegal memory access, the time limit) leaves no result, and
the parent reports that with this process's log.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from .sandbox import RESULT_FILE


def main(job_path: str) -> int:
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
