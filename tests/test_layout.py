"""The house rules of the source tree (README "Layout"): no module over 400 lines, no function
over 60 outside kernels, no import cycle (lazy imports included, type-only ones not), tools/
imports only torch and its kernel languages, and the README's layout table names the tree."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ("agent", "tools", "retrieval")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
TOOLS_MAY_IMPORT = {"torch", "triton", "cupy", "numpy", "kforge"}


def _modules() -> dict[str, Path]:
    found = {"kforge": ROOT / "__init__.py", "kforge.gemm": ROOT / "gemm.py"}
    for folder in SOURCE:
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(("kforge", *(parts[:-1] if parts[-1] == "__init__" else parts)))
            found[name] = path
    return found


def _is_kernel(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("jit" in ast.unparse(d) for d in node.decorator_list)


def _type_only(tree: ast.Module) -> set[int]:
    """Nodes under ``if TYPE_CHECKING:``: never imported at run time."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(x) for stmt in node.body for x in ast.walk(stmt))
    return skip


def _imports(name: str, path: Path) -> set[str]:
    """Every module ``name`` imports, at its top or inside a function."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skip, out = _type_only(tree), set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            out.add(module)
            out.update(f"{module}.{a.name}" for a in node.names)
    return out


def test_no_module_is_too_long() -> None:
    long = {n: len(p.read_text().splitlines()) for n, p in _modules().items()}
    assert {n: k for n, k in long.items() if k > MAX_MODULE_LINES} == {}


def test_no_function_is_too_long() -> None:
    long = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_kernel(node):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert long == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle() -> None:
    modules = _modules()
    graph = {n: {m for m in _imports(n, p) if m in modules and m != n} for n, p in modules.items()}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_tools_import_only_torch_and_kernel_languages() -> None:
    """tools/ runs on a bare GPU box: the standard library, torch, triton, cupy and itself."""
    modules = _modules()
    bad = []
    for name, path in modules.items():
        if not name.startswith("kforge.tools"):
            continue
        for imported in _imports(name, path):
            top = imported.split(".")[0]
            inside = imported.startswith("kforge.tools") or imported in ("kforge", "kforge.tools")
            if top == "kforge" and not inside or top not in TOOLS_MAY_IMPORT | sys.stdlib_module_names:
                bad.append(f"{name} imports {imported}")
    assert bad == []


def test_the_readme_layout_table_names_the_tree() -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^\| `([\w/]+?)/?` \|", section, flags=re.M))
    packages = {
        p.parent.relative_to(ROOT).as_posix()
        for folder in ("agent", "tools")
        for p in (ROOT / folder).glob("*/__init__.py")
    }
    folders = {"agent", "tools", "retrieval", "prompts", "corpus", "examples", "tests", "bench", "docs"}
    assert folders | packages <= named, sorted(folders | packages - named)
    assert all((ROOT / n).is_dir() for n in named), sorted(n for n in named if not (ROOT / n).is_dir())
