"""Loading KernelBench-format tasks and parsing candidates: bad input is a TaskError with a
one-line message that names what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from kforge.tools.task import TaskError, check_module_here, detect_backend, load_task, parse_candidate

pytestmark = pytest.mark.slow  # end to end: left out of the quick loop (-m 'not slow and not gpu')

GOOD_TASK = """
import torch
import torch.nn as nn

N = 8


class Model(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.n = n

    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(N, N)]


def get_init_inputs():
    return [N]
"""

BAD_TASKS = {
    "missing_get_inputs": (
        GOOD_TASK.replace("def get_inputs():\n    return [torch.randn(N, N)]\n", ""),
        "missing get_inputs",
    ),
    "missing_model_and_init": (
        GOOD_TASK.replace("class Model(", "class Other(").replace("get_init_inputs", "init_inputs"),
        "missing Model, get_init_inputs",
    ),
    "get_inputs_needs_an_argument": (
        GOOD_TASK.replace("def get_inputs():", "def get_inputs(batch):"),
        "get_inputs must be a function taking no arguments",
    ),
    "get_init_inputs_needs_an_argument": (
        GOOD_TASK.replace("def get_init_inputs():", "def get_init_inputs(*, scale):"),
        "get_init_inputs must be a function taking no arguments",
    ),
    "raises_at_import": (
        GOOD_TASK + "\nraise RuntimeError('dataset not found\\nsecond line')\n",
        "raises at import: RuntimeError: dataset not found",
    ),
    "import_error": (
        "import not_a_real_module_kforge\n" + GOOD_TASK,
        "raises at import: ModuleNotFoundError",
    ),
    "model_not_a_module": (
        GOOD_TASK.replace("class Model(nn.Module):", "class Model:").replace("super().__init__()", "pass"),
        "Model must be a subclass of torch.nn.Module",
    ),
    "init_inputs_do_not_match": (
        GOOD_TASK.replace("return [N]", "return [N, N, N]"),
        "does not match Model.__init__",
    ),
    "init_inputs_missing_argument": (
        GOOD_TASK.replace("return [N]", "return []"),
        "does not match Model.__init__",
    ),
    "init_inputs_not_a_list": (
        GOOD_TASK.replace("return [N]", "return N"),
        "get_init_inputs() must return a list, got int",
    ),
    "init_inputs_raises": (
        GOOD_TASK.replace("return [N]", "return [1 // 0]"),
        "get_init_inputs() raises ZeroDivisionError",
    ),
    "syntax_error": (GOOD_TASK.replace("def forward(self, x):", "def forward(self, x)"), "not valid Python"),
}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return path


def test_good_task_loads(tmp_path: Path) -> None:
    task = load_task(write(tmp_path, "good", GOOD_TASK))
    assert task.name == "good"
    assert task.path.is_absolute()
    assert task.source == GOOD_TASK
    assert len(task.hash) == 16


def test_fixture_example_and_bench_tasks_load(fixtures_dir: Path) -> None:
    paths = sorted((fixtures_dir / "tasks").glob("*.py"))
    root = Path(__file__).parents[1]
    paths += sorted((root / "examples" / "tasks").glob("*.py"))
    paths += sorted((root / "bench" / "tasks").glob("*.py"))  # a broken one would cost device time
    assert paths
    assert load_task(paths[0]).name == paths[0].stem  # in a worker, as kforge loads a task
    for path in paths:  # our own files: checked here, without a worker each (6 s apiece on CI)
        assert load_task(path, check_import=False).name == path.stem
        assert check_module_here(path, path.name) == "", path


@pytest.mark.parametrize("case", sorted(BAD_TASKS))
def test_bad_task_is_a_one_line_task_error(tmp_path: Path, case: str) -> None:
    text, phrase = BAD_TASKS[case]
    path = write(tmp_path, case, text)
    with pytest.raises(TaskError) as info:
        load_task(path)
    message = str(info.value)
    assert phrase in message
    assert "\n" not in message
    assert str(path) in message


def test_missing_file_is_a_task_error(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="no such task file"):
        load_task(tmp_path / "absent.py")


def test_check_import_false_reads_without_running(tmp_path: Path) -> None:
    text, _ = BAD_TASKS["raises_at_import"]
    task = load_task(write(tmp_path, "lazy", text), check_import=False)
    assert task.name == "lazy"


def test_task_import_leaves_no_module_behind(tmp_path: Path) -> None:
    import sys

    before = set(sys.modules)
    load_task(write(tmp_path, "clean", GOOD_TASK))
    assert not [name for name in set(sys.modules) - before if name.startswith("kforge_check_")]


CANDIDATE = """
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x
"""


def test_parse_candidate_torch_only() -> None:
    candidate = parse_candidate(CANDIDATE)
    assert candidate.backend == "torch-only"
    assert len(candidate.hash) == 16


@pytest.mark.parametrize(
    ("header", "backend"),
    [
        ("import triton\nimport triton.language as tl\n", "triton"),
        ("from torch.utils.cpp_extension import load_inline\n", "cuda"),
        ("import torch.utils.cpp_extension as ext\n\nmod = ext.load_inline\n", "cuda"),
        ("from torch.utils import cpp_extension\n\nmod = cpp_extension.load_inline\n", "cuda"),
        ("import cupy as cp\n", "cupy"),
    ],
)
def test_backend_detection(header: str, backend: str) -> None:
    assert parse_candidate(header + CANDIDATE).backend == backend


def test_backend_of_fixture_candidates(fixture_source) -> None:
    import ast

    assert detect_backend(ast.parse(fixture_source("candidates/scale_relu_triton.py"))) == "triton"
    assert detect_backend(ast.parse(fixture_source("candidates/scale_relu_torch.py"))) == "torch-only"


@pytest.mark.parametrize(
    ("source", "phrase"),
    [
        ("import torch\n\nclass Model(torch.nn.Module):\n    pass\n", "does not define class ModelNew"),
        ("class ModelNew(:\n    pass\n", "not valid Python"),
        ("", "does not define class ModelNew"),
    ],
)
def test_parse_candidate_format_errors(source: str, phrase: str) -> None:
    with pytest.raises(TaskError) as info:
        parse_candidate(source)
    assert phrase in str(info.value)
    assert "\n" not in str(info.value)


TASK_TAIL = (
    "import torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n\n"
    "def get_inputs():\n    return []\n\ndef get_init_inputs():\n    return []\n"
)


@pytest.mark.parametrize(
    ("head", "reason"),
    [
        ("import os\nos._exit(0)\n", "exited with code 0"),
        ("import ctypes\nctypes.string_at(0)\n", "killed by signal SIGSEGV"),
        ("import time\ntime.sleep(60)\n", "timed out"),
    ],
)
def test_a_task_that_exits_or_hangs_at_import_costs_a_worker_not_kforge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, head: str, reason: str
) -> None:
    """The task's code runs in a worker with a time limit: kforge (the CLI, the MCP server)
    gets a one-line reason and goes on."""
    from kforge.tools import task as task_module

    monkeypatch.setattr(task_module, "CHECK_TIMEOUT_S", 8.0)  # under the 60 s hang (which comes first)
    path = tmp_path / "hostile.py"
    path.write_text(head + TASK_TAIL)
    with pytest.raises(TaskError) as caught:
        load_task(path)
    message = str(caught.value)
    assert reason in message and "\n" not in message, message
