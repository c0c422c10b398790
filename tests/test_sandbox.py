"""Worker isolation: a crash, a hang or running out of memory ends that worker only, with a
typed status and the real message; workers get no secrets, a scratch folder and no network."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from kforge.tools.evaluate import EvalOptions, evaluate, evaluate_many
from kforge.tools.result import Result, Status
from kforge.tools.sandbox import Limits, WorkerOutcome, clean_env, run_worker
from kforge.tools.task import Task

pytestmark = pytest.mark.slow  # end to end: left out of the quick loop (-m 'not slow and not gpu')

REPO = Path(__file__).parents[1]
SECRETS = {
    "OPENAI_API_KEY": "sk-test-not-real",
    "HF_TOKEN": "hf_test_not_real",
    "ANTHROPIC_API_KEY": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "GITHUB_TOKEN": "test",
    "MY_DB_PASSWORD": "test",
    "SOME_SERVICE_CREDENTIALS": "test",
}
ROOT_ON_LINUX = sys.platform.startswith("linux") and hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(scope="module")
def scale_relu(fixture_task: Callable[[str], Task]) -> Task:
    return fixture_task("scale_relu")


def test_clean_env_removes_secrets_and_keeps_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KFORGE_TEST_PLAIN", "kept")
    env = clean_env({"TRITON_INTERPRET": "1"})
    assert not set(SECRETS) & set(env)
    assert env["KFORGE_TEST_PLAIN"] == "kept"
    assert env["TRITON_INTERPRET"] == "1"
    assert "PATH" in env


@pytest.mark.parametrize(
    ("outcome", "reason"),
    [
        (WorkerOutcome(None, -9, True, False, 5.0, ""), "timed out"),
        (WorkerOutcome(None, -9, False, True, 5.0, ""), "exceeded the host memory limit"),
        (WorkerOutcome(None, -int(signal.SIGSEGV), False, False, 1.0, ""), "killed by signal SIGSEGV"),
        (WorkerOutcome(None, -int(signal.SIGABRT), False, False, 1.0, ""), "killed by signal SIGABRT"),
        (WorkerOutcome(None, 3, False, False, 1.0, ""), "exited with code 3 before writing a result"),
    ],
)
def test_crash_reasons(outcome: WorkerOutcome, reason: str) -> None:
    assert outcome.crash_reason == reason


@pytest.fixture(scope="module")
def crash_batch(
    scale_relu: Task,
    fixture_source: Callable[[str], str],
    make_session_cpu_options: Callable[..., EvalOptions],
) -> dict[str, Result]:
    names = ["segfault", "oom", "scale_relu_torch"]
    sources = [fixture_source(f"candidates/{n}.py") for n in names]
    results = evaluate_many(scale_relu, sources, make_session_cpu_options(memory_limit_gb=1.0))
    return dict(zip(names, results, strict=True))


def test_segfault_ends_its_worker_only(crash_batch: dict[str, Result]) -> None:
    result = crash_batch["segfault"]
    assert result.status == Status.RUNTIME_ERROR
    assert "killed by signal SIGSEGV" in result.log
    assert crash_batch["scale_relu_torch"].status == Status.OK


def test_out_of_memory_is_a_runtime_error_with_the_message(crash_batch: dict[str, Result]) -> None:
    result = crash_batch["oom"]
    assert result.status == Status.RUNTIME_ERROR
    log = result.log.lower()
    assert "memory" in log and ("can't allocate" in log or "exceeded the host memory limit" in log), log
    assert crash_batch["scale_relu_torch"].status == Status.OK


@pytest.mark.skipif(not ROOT_ON_LINUX, reason="a fresh network namespace needs root on Linux here")
def test_worker_has_no_network(crash_batch: dict[str, Result]) -> None:
    assert "network: isolated" in crash_batch["scale_relu_torch"].log


def test_hang_times_out_and_the_next_worker_is_clean(
    scale_relu: Task,
    fixture_source: Callable[[str], str],
    make_cpu_options: Callable[..., EvalOptions],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    cache_dir: Path,
) -> None:
    hung = evaluate(scale_relu, fixture_source("candidates/hang.py"), make_cpu_options(timeout_s=6.0))
    assert hung.status == Status.TIMEOUT
    assert "worker timed out after" in hung.log

    # The next candidate runs normally, without the parent's secrets, in a scratch folder.
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    probe = tmp_path / "probe.json"
    monkeypatch.setenv("KFORGE_TEST_PROBE", str(probe))
    options = make_cpu_options(extra_writable=(tmp_path,))  # the probe's folder, and nothing else
    result = evaluate(scale_relu, fixture_source("candidates/env_probe.py"), options)
    assert result.status == Status.OK, result.log
    seen = json.loads(probe.read_text())
    assert not set(SECRETS) & set(seen["env"])
    assert "KFORGE_TEST_PROBE" in seen["env"]
    cwd = Path(seen["cwd"])
    assert cwd.is_relative_to(cache_dir / "scratch"), cwd
    assert not cwd.is_relative_to(REPO)
    assert not cwd.exists(), "the scratch folder is removed after the evaluation"
    if ROOT_ON_LINUX:
        devices = [line.split(":")[0].strip() for line in seen["net"].splitlines()[2:]]
        assert devices == ["lo"]


def test_memory_watchdog_kills_a_worker_without_an_address_limit(tmp_path: Path) -> None:
    """On the GPU RLIMIT_AS is off (CUDA reserves huge ranges): the RSS watchdog must act."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    task = scratch / "hog.py"  # task code runs in a worker too: this one eats memory at import
    task.write_text(
        "import torch, torch.nn as nn\n"
        "_hog = [torch.ones(2**27) for _ in range(64)]\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        return x\n"
        "def get_inputs():\n    return [torch.ones(1)]\n"
        "def get_init_inputs():\n    return []\n"
    )
    job = {
        "mode": "baseline", "device": "cpu", "precision": "fp32", "timing_trials": 3,
        "compile_baseline": False, "seed": 0, "task_path": str(task),
    }  # fmt: skip
    limits = Limits(timeout_s=120.0, memory_limit_gb=1.0, limit_address_space=False)
    env = clean_env({"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1", "KFORGE_SPARE_WORKER": "0"})
    outcome = run_worker(job, scratch, limits, env)
    assert outcome.out_of_memory
    assert outcome.result is None
    assert outcome.crash_reason == "exceeded the host memory limit"
    assert outcome.elapsed_s < 110


def test_the_next_worker_is_started_ahead_and_serves_one_job(
    scale_relu: Task, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kforge.tools import spares

    spares._end_spare()
    job = {
        "mode": "baseline", "device": "cpu", "precision": "fp32", "timing_trials": 3,
        "compile_baseline": False, "seed": 0, "task_path": str(scale_relu.path),
    }  # fmt: skip
    limits = Limits(timeout_s=120.0, memory_limit_gb=4.0)
    env = clean_env({"CUDA_VISIBLE_DEVICES": "", "KFORGE_TEST_SPARE": str(tmp_path)})

    def run(name: str, env: dict[str, str] = env) -> WorkerOutcome:
        outcome = run_worker(job, tmp_path / name, limits, env)
        assert outcome.result is not None and outcome.result["status"] == "ok", outcome.log
        assert "timing:" in outcome.result["log"] and "timing:" in outcome.log  # its own log, whole
        return outcome

    spares.in_a_run("evaluation")  # as after an optimize run's evaluations
    assert not run("first").prestarted
    assert spares._spare is None, "a run's one baseline starts no spare: it would import torch for nothing"
    assert not run("second").prestarted  # baselines in a row: the second starts one for the third
    third = run("third")
    assert third.prestarted and (tmp_path / "third" / "worker.log").is_file()
    assert spares._spare is not None and spares._spare.proc.poll() is None, "the next one waits"
    spares._spare.proc.kill()  # a spare that died while waiting: a fresh worker instead
    spares._spare.proc.wait()
    assert not run("after-kill").prestarted
    assert not run("other-env", env | {"KFORGE_TEST_OTHER": "1"}).prestarted, (
        "a spare only serves its own env"
    )
    monkeypatch.setenv("KFORGE_SPARE_WORKER", "0")
    spares._end_spare()
    assert not run("off").prestarted and spares._spare is None


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="only root can lower a nice value"
)
def test_a_handed_over_spare_runs_every_thread_at_normal_priority(tmp_path: Path) -> None:
    """The spare imports at nice 19; threads it started then kept 19 after hand-over (only the
    main thread was reset), and so did anything they started for the job."""
    import subprocess
    import time

    from kforge.tools.spares import _renice

    code = "import sys, threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\nsys.stdin.readline()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, preexec_fn=lambda: os.nice(19)
    )
    try:
        task = Path(f"/proc/{proc.pid}/task")
        deadline = time.monotonic() + 20
        while len(list(task.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)

        def nice_values() -> list[int]:
            return [int((t / "stat").read_text().rsplit(")", 1)[1].split()[16]) for t in task.iterdir()]

        assert nice_values() == [19, 19]
        os.setpriority(os.PRIO_PROCESS, proc.pid, 0)  # what hand-over did before: the main thread only
        assert sorted(nice_values()) == [0, 19]
        _renice(proc.pid)
        assert nice_values() == [0, 0]
    finally:
        proc.kill()
        proc.wait()


FORK_BOMB = """
import os, time
import torch
import torch.nn as nn

for _ in range(40):  # forty copies of this process: their pages are the parent's, shared
    if os.fork() == 0:
        time.sleep(3)
        os._exit(0)
time.sleep(1)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.relu(x * self.weight + self.bias)
"""


def test_shared_pages_of_forked_children_count_once(
    scale_relu: Task, make_cpu_options: Callable[..., EvalOptions]
) -> None:
    """Forty forked copies of a 300 MB worker hold one copy's pages: summing their resident
    sizes called that 12 GB and killed the worker as "exceeded the host memory limit"."""
    result = evaluate(scale_relu, FORK_BOMB, make_cpu_options(memory_limit_gb=3.0))
    assert result.status == Status.OK, (result.status, result.log[-1500:])


def test_the_watchdog_reads_the_proportional_size_only_past_the_limit() -> None:
    """The resident sizes (cheap) bound the proportional one (a walk of every mapping) from above:
    within the limit they answer, past it the proportional size decides, as the fork bomb needs."""
    from kforge.tools.process import _rss_kb

    resident, proportional = _rss_kb(os.getpid(), float("inf")), _rss_kb(os.getpid(), 0.0)
    assert 0 < proportional <= resident


FORK_HOG = """
import os, time
import torch
import torch.nn as nn

# Each child's private 60 MB stays under the address-space limit every process has on its
# own; together they are over the worker's limit: only the watchdog's sum over the tree sees it.
for _ in range(16):
    if os.fork() == 0:
        hog = torch.ones(15 * 2**20)  # 60 MB, touched
        time.sleep(60)
        os._exit(0)
time.sleep(60)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.relu(x * self.weight + self.bias)
"""


def test_children_that_together_pass_the_limit_end_the_worker(
    scale_relu: Task, make_cpu_options: Callable[..., EvalOptions]
) -> None:
    """A candidate that spreads its memory over sixteen forked children, each under the address
    limit every process has on its own: the watchdog sums the tree (its cheap resident sum, then
    the proportional sizes past the limit) and ends the worker."""
    result = evaluate(scale_relu, FORK_HOG, make_cpu_options(memory_limit_gb=1.0))
    assert result.status == Status.RUNTIME_ERROR, (result.status, result.log[-1500:])
    assert "candidate worker exceeded the host memory limit" in result.log


SHARED_HOG = """
import mmap
import os

import torch
import torch.nn as nn


def _fill_the_channel_file():
    # the shared memory file between judge and worker, 1.5 GB of it written 64 MB at a time:
    # mapped and unmapped piece by piece, none of it stays in this process's resident size
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "kforge-pair" not in os.readlink(f"/proc/self/fd/{fd}"):
                continue
        except OSError:
            continue
        piece = 64 << 20
        for at in range(1 << 30, (1 << 30) + (3 << 29), piece):  # past the 1 GiB pwrite may reach
            with mmap.mmap(int(fd), piece, offset=at) as m:
                for page in range(0, piece, 4096):
                    m[page] = 1


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        _fill_the_channel_file()
        return torch.relu(x * self.weight + self.bias)
"""


def test_memory_held_in_the_shared_channel_file_counts_against_the_candidate(
    scale_relu: Task, make_cpu_options: Callable[..., EvalOptions], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The judge and the worker share a memory file for tensors (tools/wire.py); a candidate
    that writes 1.5 GB into it, a piece at a time, holds that memory in no process's resident
    size: the watchdog counts the file's pages against the candidate and ends it. (The static
    checks, off here, would reject the source first: this is the boundary behind them.)"""
    from kforge.tools import evaluate as evaluate_module

    monkeypatch.setattr(evaluate_module, "static_cheats", lambda *args: [])
    result = evaluate(scale_relu, SHARED_HOG, make_cpu_options(memory_limit_gb=1.0))
    assert result.status == Status.RUNTIME_ERROR, (result.status, result.log[-1500:])
    assert "candidate worker exceeded the host memory limit" in result.log


def test_the_default_memory_limit_fits_this_host() -> None:
    from kforge.tools.evaluate import default_memory_gb

    host_gb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    assert 2 * default_memory_gb() < host_gb or default_memory_gb() == 2.0


CHATTY = """
import sys
import torch
import torch.nn as nn

chunk = "x" * (1 << 20) + "\\n"
for _ in range(int(sys.maxsize)):  # prints until the file-size limit stops it
    sys.stdout.write(chunk)


class ModelNew(nn.Module):
    def forward(self, x):
        return x
"""


def test_a_candidate_that_prints_without_end_is_stopped_and_costs_kforge_a_tail(
    scale_relu: Task, make_cpu_options: Callable[..., EvalOptions], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's log stops growing at the file-size limit (Python ignores SIGXFSZ, so the
    write fails: "File too large"), and what kforge keeps of it is the tail."""
    from kforge.tools import process

    monkeypatch.setattr(process, "MAX_FILE_BYTES", 64 << 20)
    result = evaluate(scale_relu, CHATTY, make_cpu_options())
    assert result.status == Status.RUNTIME_ERROR, (result.status, result.log[-500:])
    assert "File too large" in result.log or "SIGXFSZ" in result.log, result.log[:2000]
    assert len(result.log) < 64_000
