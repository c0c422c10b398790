"""``kforge batch --ray ADDRESS`` on a local Ray cluster started here with two fake GPUs
(``--device cpu``): a Ray worker killed mid-task is retried and the batch completes; a killed
driver's batch resumes on the cluster without redoing finished tasks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

pytestmark = pytest.mark.slow  # end to end: left out of the quick loop (-m 'not slow and not gpu')

TASK = Path(__file__).parent / "fixtures" / "batch" / "tasks" / "linear_sum.py"
CLI = [sys.executable, "-c", "from kforge.agent.cli import main; main()", "batch"]
TINY = ["--device", "cpu", "--timing-trials", "3", "--trials", "2", "--rounds", "1", "--candidates", "1"]
TINY += ["--strategies", "fx-rewrite", "--no-confirm", "--quiet"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A one-node Ray cluster declaring 2 CPUs and 2 GPUs; its address."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path_factory.mktemp("ray") / "head.log").open("w")
    head = subprocess.Popen(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--port", str(port),
         "--num-cpus", "2", "--num-gpus", "2", "--include-dashboard", "false", "--disable-usage-stats"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        status = subprocess.run(
            [sys.executable, "-m", "ray.scripts.scripts", "status", "--address", address],
            capture_output=True, text=True,
        )  # fmt: skip
        if status.returncode == 0 and "GPU" in status.stdout:
            break
        time.sleep(1)
    else:
        pytest.fail(f"the Ray head did not start: {Path(log.name).read_text()[-2000:]}")
    yield address
    # The head and all it started (GCS, raylet, agents, workers) share its process group; killed
    # outright, they are gone at once where SIGTERM's orderly stop took 34 s.
    os.killpg(head.pid, signal.SIGKILL)
    head.wait(timeout=60)
    log.close()
    current = Path("/tmp/ray/ray_current_cluster")  # where address="auto" looks: not at a dead cluster
    if current.is_file() and current.read_text().strip().endswith(f":{port}"):
        current.unlink()


@pytest.fixture
def env(cache_dir):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    env["KFORGE_CACHE"] = str(cache_dir)
    return env


def _tasks(folder: Path, count: int) -> Path:
    folder.mkdir()
    for i in range(count):
        (folder / f"{i + 1}_linear_sum.py").write_text(TASK.read_text())
    return folder


def _lines(out: Path) -> list[dict]:
    path = out / "results.jsonl"
    return [json.loads(t) for t in path.read_text().splitlines()] if path.is_file() else []


def _running_ray_tasks() -> list[int]:
    """Pids of Ray workers running a batch task (Ray titles them ``ray::ray_task``)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cmdline").read_bytes().startswith(b"ray::ray_task"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def test_a_killed_worker_costs_only_its_task_which_is_retried(tmp_path, env, cluster):
    out = tmp_path / "batch"
    batch = subprocess.Popen([*CLI, str(_tasks(tmp_path / "tasks", 2)), *TINY, "--out", str(out),
                              "--ray", cluster], env=env, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while not (out / "runs").is_dir() and time.monotonic() < deadline:
        time.sleep(0.2)
    running = _running_ray_tasks()
    assert running and not _lines(out), "no batch task was running on the cluster"
    os.kill(running[0], signal.SIGKILL)
    _, stderr = batch.communicate(timeout=400)
    assert batch.returncode == 0, stderr[-3000:]
    lines = _lines(out)
    assert sorted(x["task"] for x in lines) == ["1_linear_sum", "2_linear_sum"]
    assert all(x["status"] == "ok" and x["best_strategy"].startswith("fx-rewrite") for x in lines)
    assert running[0] not in {x["worker"]["pid"] for x in lines}  # the killed task ran again elsewhere


def test_a_killed_driver_resumes_on_the_cluster(tmp_path, env, cluster):
    out = tmp_path / "batch"
    driver = subprocess.Popen([*CLI, str(_tasks(tmp_path / "tasks", 3)), *TINY, "--out", str(out),
                               "--ray", cluster], env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 300
    while not _lines(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    before = _lines(out)
    assert 1 <= len(before) < 3
    done = subprocess.run([*CLI, "--resume", str(out), "--quiet"], env=env, capture_output=True, text=True,
                          timeout=400)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    after = _lines(out)
    assert after[: len(before)] == before  # finished tasks were not run again
    assert sorted(x["task"] for x in after) == ["1_linear_sum", "2_linear_sum", "3_linear_sum"]
    assert all(x["status"] == "ok" for x in after)
    assert json.loads((out / "batch.json").read_text())["ray"] == cluster


@pytest.mark.parametrize("written", [None, "127.0.0.1:9"])
def test_ray_auto_without_a_live_cluster_fails_at_once_in_one_line(tmp_path, env, written):
    """No cluster started here, or a stale address left by one that is gone: one line within
    seconds (Ray itself retried a stale address for minutes)."""
    env = {k: v for k, v in env.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": str(tmp_path)}
    if written:
        (tmp_path / "ray").mkdir()
        (tmp_path / "ray" / "ray_current_cluster").write_text(written + "\n")
    start = time.monotonic()
    done = subprocess.run(
        [*CLI, str(_tasks(tmp_path / "tasks", 1)), *TINY, "--ray", "auto", "--out", str(tmp_path / "b")],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and time.monotonic() - start < 60, done.stderr[-2000:]
    expected = "no Ray cluster answers at 127.0.0.1:9" if written else "no Ray cluster was started"
    assert expected in done.stderr and "ray start --head --num-gpus N" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
