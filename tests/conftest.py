"""Shared fixtures: fixture paths, source imported in-process (``load_source``), a scratch
cache folder, CPU evaluation options, Python run under Triton's interpreter, and the skip for
tests marked ``gpu`` on machines without CUDA."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from kforge.tools.evaluate import EvalOptions
from kforge.tools.result import Result, Status
from kforge.tools.task import Task, load_task

FIXTURES = Path(__file__).parent / "fixtures"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)")


@pytest.fixture
def load_source(tmp_path: Path) -> Callable[[str, str], types.ModuleType]:
    """Import Python source (a task, a candidate) in this process as module ``name``: its
    forward run here, on the CPU, beside another."""

    def load(source: str, name: str) -> types.ModuleType:
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def train_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the recorded training runs (tests/fixtures/train/runs): opening a store
    writes to it, and the committed fixtures stay as they are."""
    runs = tmp_path_factory.mktemp("train") / "runs"
    shutil.copytree(FIXTURES / "train" / "runs", runs)
    return runs


@pytest.fixture(scope="session")
def fixture_source() -> Callable[[str], str]:
    """The text of a fixture file by its path under tests/fixtures, e.g. "cheats/hang.py"."""

    def read(relative: str) -> str:
        return (FIXTURES / relative).read_text()

    return read


@pytest.fixture(scope="session")
def fixture_task() -> Callable[[str], Task]:
    """A fixture task by name, e.g. "scale_relu"."""

    def load(name: str) -> Task:
        return load_task(FIXTURES / "tasks" / f"{name}.py", check_import=False)  # tests/test_task.py checks

    return load


# What a cache folder (EvalOptions.cache_dir, KFORGE_CACHE) holds only to save time: the bytecode
# of what workers import (PYTHONPYCACHEPREFIX: in a new folder a worker recompiles some 3000 torch
# modules, 6 s on 2 cores) and Inductor's and Triton's compiled code. Every test's folder links
# them to the session's; what a test checks (runs, results, extensions, scratch) stays its own.
SHARED_CACHES = ("pycache", "inductor", "triton", "judge")


@pytest.fixture(scope="session")
def session_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache folder for module-scoped evaluations (compiled extensions, Triton caches)."""
    path = tmp_path_factory.mktemp("kforge-cache")
    for name in SHARED_CACHES:
        (path / name).mkdir()
    return path


@pytest.fixture
def cache_dir(tmp_path: Path, session_cache_dir: Path) -> Path:
    """``tmp_path / "cache"``: a test's own cache folder, its SHARED_CACHES the session's."""
    path = tmp_path / "cache"
    path.mkdir()
    for name in SHARED_CACHES:
        (path / name).symlink_to(session_cache_dir / name, target_is_directory=True)
    return path


def cpu_options(cache_dir: Path, **overrides: object) -> EvalOptions:
    """Small, fast settings for evaluations on the CPU."""
    settings: dict[str, object] = dict(
        device="cpu", trials=5, timing_trials=3, compile_baseline=False, timeout_s=120.0, cache_dir=cache_dir
    )
    settings.update(overrides)
    return EvalOptions(**settings)  # type: ignore[arg-type]


@pytest.fixture
def make_cpu_options(cache_dir: Path) -> Callable[..., EvalOptions]:
    """EvalOptions for the CPU with a per-test cache folder; keyword overrides pass through."""
    return lambda **overrides: cpu_options(cache_dir, **overrides)


@pytest.fixture(scope="session")
def make_session_cpu_options(session_cache_dir: Path) -> Callable[..., EvalOptions]:
    """The same for module- and session-scoped fixtures."""
    return lambda **overrides: cpu_options(session_cache_dir, **overrides)


@pytest.fixture(scope="session")
def make_gpu_options(session_cache_dir: Path) -> Callable[..., EvalOptions]:
    """EvalOptions for the first CUDA GPU, with fewer timed runs than the default."""

    def make(**overrides: object) -> EvalOptions:
        settings: dict[str, object] = dict(
            device="cuda", trials=5, timing_trials=20, timeout_s=300.0, cache_dir=session_cache_dir
        )
        settings.update(overrides)
        return EvalOptions(**settings)  # type: ignore[arg-type]

    return make


@pytest.fixture(scope="session")
def loaded_host_only() -> Callable[[Result], None]:
    def check(result: Result) -> None:
        """An honest candidate's wall-clock check can fail on a CPU host running more than it has
        cores (its worker waits for a core between blocks; eager, in the judge, does not): that
        is the only rejection allowed, and the log must show the load."""
        assert result.status == Status.REJECTED, (result.status, result.log[-600:])
        assert all(reason.startswith("timing claims do not add up") for reason in result.cheats), (
            result.cheats
        )
        host = next(line for line in result.log.splitlines() if line.startswith("timing host:"))
        load, cores = re.search(r"load ([\d.]+) on (\d+) cores", host).groups()  # type: ignore[union-attr]
        assert float(load) >= int(cores), host

    return check


@pytest.fixture(scope="session")
def interpreted() -> Callable[[str], str]:
    """Runs code in a new process under Triton's interpreter (TRITON_INTERPRET=1, which Triton
    reads at import) and gives the last line it printed."""

    def run(code: str) -> str:
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip().splitlines()[-1]

    return run
