"""KernelBench-format tasks and candidate sources.

A task file defines ``class Model(nn.Module)``, ``get_inputs()`` and
``get_init_inputs()``; a candidate defines ``class ModelNew(nn.Module)`` taking the same
constructor arguments. Anything else is bad input and raises :class:`TaskError` with a
one-line message that says what is missing.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib.util
import inspect
import shutil
import sys
import tempfile
import types
from pathlib import Path

import torch


class TaskError(ValueError):
    """A file that is not a valid task or candidate. The message is one line."""


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Task:
    name: str
    path: Path
    source: str

    @property
    def hash(self) -> str:
        return source_hash(self.source)


def import_file(path: Path, module_name: str) -> types.ModuleType:
    """Import a Python file as a fresh module (Triton needs a real file for its sources)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise TaskError(f"{path}: cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def load_task(path: str | Path, *, check_import: bool = True) -> Task:
    """Read and check a task file. With ``check_import`` it is imported and its entry points checked."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"{path}: no such task file")
    source = path.read_text()
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as err:
        raise TaskError(f"{path}: not valid Python (line {err.lineno}: {err.msg})") from None
    defined = _top_level_names(tree)
    missing = [name for name in ("Model", "get_inputs", "get_init_inputs") if name not in defined]
    if missing:
        raise TaskError(f"{path}: not a KernelBench task, missing {', '.join(missing)}")
    task = Task(name=path.stem, path=path.resolve(), source=source)
    if check_import:
        check_task_module(task)
    return task


CHECK_TIMEOUT_S = 60.0  # a task whose import takes longer is bad input


def check_task_module(task: Task) -> None:
    """Import the task and check its entry points, in a worker: a task's code never runs in
    kforge's own process (one that exits, sleeps or reads the environment at import costs a
    worker, within CHECK_TIMEOUT_S). Raises :class:`TaskError` with the one-line reason."""
    problem = _checked(task.source, str(task.path))
    if problem:
        raise TaskError(problem)


@functools.cache
def _checked(source: str, label: str) -> str:
    """The reason ``source`` is not a valid task ("" when it is), from a worker; the same
    source is checked once a process."""
    from .cache import default_cache_dir
    from .sandbox import Limits, clean_env, run_worker

    scratch = Path(tempfile.mkdtemp(prefix="kforge-check-"))
    pycache = default_cache_dir() / "judge" / "pycache"  # the judge's bytecode: torch compiled once
    pycache.mkdir(parents=True, exist_ok=True)
    try:
        copy = scratch / "task.py"
        copy.write_text(source)
        job = {"mode": "check", "task_path": str(copy), "label": label, "writable": [str(pycache)]}
        env = clean_env(
            {
                "CUDA_VISIBLE_DEVICES": "",
                "PYTHONUNBUFFERED": "1",
                "PYTHONPYCACHEPREFIX": str(pycache),
                "PYTHONDONTWRITEBYTECODE": "",
            }
        )
        outcome = run_worker(job, scratch, Limits(timeout_s=CHECK_TIMEOUT_S, memory_limit_gb=8.0), env)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if outcome.result is None:
        last = outcome.log.strip().splitlines()[-1:] or [""]
        return f"{label}: importing it {outcome.crash_reason} {last[0][:200]}".rstrip()
    return str(outcome.result.get("error", ""))


def check_module_here(path: Path, label: str) -> str:
    """The check itself, run by the worker (:func:`check_task_module`): "" or the reason."""
    try:
        _check_module(path, label)
    except TaskError as err:
        return str(err)
    return ""


def _check_module(path: Path, label: str) -> None:
    name = "kforge_check_task"
    try:
        module = import_file(path, name)
    except TaskError:
        raise
    except BaseException as err:  # user code: any exception is bad input here
        raise TaskError(f"{label}: raises at import: {type(err).__name__}: {_first_line(err)}") from None
    finally:
        sys.modules.pop(name, None)
    model = getattr(module, "Model", None)
    if not (isinstance(model, type) and issubclass(model, torch.nn.Module)):
        raise TaskError(f"{label}: Model must be a subclass of torch.nn.Module")
    for fn_name in ("get_inputs", "get_init_inputs"):
        fn = getattr(module, fn_name, None)
        if not callable(fn) or _required_params(fn) > 0:
            raise TaskError(f"{label}: {fn_name} must be a function taking no arguments")
    try:
        init_inputs = module.get_init_inputs()
    except BaseException as err:
        raise TaskError(
            f"{label}: get_init_inputs() raises {type(err).__name__}: {_first_line(err)}"
        ) from None
    if not isinstance(init_inputs, list | tuple):
        raise TaskError(f"{label}: get_init_inputs() must return a list, got {type(init_inputs).__name__}")
    try:
        inspect.signature(model).bind(*init_inputs)
    except TypeError as err:
        raise TaskError(f"{label}: Model(*get_init_inputs()) does not match Model.__init__: {err}") from None


@dataclasses.dataclass(frozen=True)
class Candidate:
    source: str
    backend: str  # "cuda", "triton", "cupy" or "torch-only"

    @property
    def hash(self) -> str:
        return source_hash(self.source)


def parse_candidate(source: str) -> Candidate:
    """Check that ``source`` is Python defining ModelNew and label its backend.

    Raises :class:`TaskError` (a format error) otherwise.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise TaskError(f"candidate is not valid Python (line {err.lineno}: {err.msg})") from None
    if "ModelNew" not in _top_level_names(tree):
        raise TaskError("candidate does not define class ModelNew")
    return Candidate(source=source, backend=detect_backend(tree))


def detect_backend(tree: ast.AST) -> str:
    imported: set[str] = set()
    called: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
            if node.module.startswith("torch.utils.cpp_extension"):
                imported.add("cpp_extension")
        elif isinstance(node, ast.Attribute):
            called.add(node.attr)
        elif isinstance(node, ast.Name):
            called.add(node.id)
    if "load_inline" in called or "cpp_extension" in imported or "cpp_extension" in called:
        return "cuda"
    if "triton" in imported:
        return "triton"
    if "cupy" in imported:
        return "cupy"
    return "torch-only"


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _required_params(fn: object) -> int:
    try:
        params = inspect.signature(fn).parameters.values()  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0
    return sum(
        1
        for p in params
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "(no message)"
