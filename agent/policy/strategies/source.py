"""Source-to-source candidates: the task's own module with ``class Model`` renamed to
``_KforgeReference`` and its input functions removed, then a ``ModelNew(_KforgeReference)``
appended whose forward applies a strategy.

Subclassing the reference keeps the parameter names identical, so the verifier loads the
same weights into both. The file needs nothing from kforge: ``best.py`` runs on its own.
"""

from __future__ import annotations

import ast
import dataclasses

REFERENCE = "_KforgeReference"
DROPPED = ("get_inputs", "get_init_inputs")


class SourceError(ValueError):
    """A task whose source cannot be turned into candidates. The message is one line."""


# Flags in names come in this order, whatever order variants added them in: the same
# candidate reached two ways (cudnn-benchmark added to nchw, or nchw to cudnn-benchmark) has one name.
FLAG_ORDER = (
    "aten-convs",
    "dynamic-outputs",
    "device-factories",
    "cudnn-benchmark",
    "channels-last",
    "nchw",
    "cpp-wrapper",
    "tf32",
    "bf16",
)


CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")  # torch.compile modes that replay a CUDA graph


@dataclasses.dataclass(frozen=True)
class Spec:
    """What a candidate does: a body (the forward's computation), a runner that executes
    it, and flags set around the call. ``family`` is the ranker's key."""

    family: str
    runner: str = "eager"  # eager | compile | cuda-graph | compile-graph
    mode: str = "default"  # torch.compile mode for the compile runners
    flags: tuple[str, ...] = ()  # cudnn-benchmark, channels-last, nchw, tf32, bf16, aten-convs
    body: str = "reference"  # reference | fx | tf32x3 | corpus:<kernel>:<variant> | hgemm:<config>
    tag: str = ""  # how the body shows in the name, e.g. "fx-rewrite[sum-of-linear]"
    note: str = ""  # one line on why it should help, for the plan

    @property
    def replays_graph(self) -> bool:
        """Runs from a captured CUDA graph: its inputs copied in and its outputs out on every call."""
        return self.runner in ("cuda-graph", "compile-graph") or (
            self.runner == "compile" and self.mode in CUDAGRAPH_MODES
        )

    @property
    def name(self) -> str:
        """Canonical: the same fields always give the same name (attempts are matched by it)."""
        runner = {
            "eager": "",
            "compile": f"compile-{self.mode}",
            "cuda-graph": "cuda-graph",
            "compile-graph": f"compile-{self.mode}+cuda-graph",
        }[self.runner]
        flags = sorted(self.flags, key=lambda f: FLAG_ORDER.index(f) if f in FLAG_ORDER else len(FLAG_ORDER))
        parts = [p for p in (self.tag, *flags, runner) if p]
        return "+".join(parts) or "eager"


@dataclasses.dataclass(frozen=True)
class Body:
    """The computation ``_kforge_body(self, ...)`` and module-level code it needs."""

    method: str  # source of ``def _kforge_body(self, ...)`` at class indentation 0
    prelude: str = ""  # module-level definitions (kernels, helpers)


REFERENCE_BODY = Body(f"def _kforge_body(self, *args):\n    return {REFERENCE}.forward(self, *args)\n")


class _RenameModel(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == "Model":
            node.id = REFERENCE
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        if node.name == "Model":
            node.name = REFERENCE
        self.generic_visit(node)
        return node


def reference_module(task_source: str) -> str:
    """The task's source with Model renamed everywhere and get_inputs/get_init_inputs removed
    (unless its other code calls them)."""
    try:
        tree = ast.parse(task_source)
    except SyntaxError as err:
        raise SourceError(f"task is not valid Python (line {err.lineno}: {err.msg})") from None
    if not any(isinstance(n, ast.ClassDef) and n.name == "Model" for n in tree.body):
        raise SourceError("task defines no class Model")
    inputs = [
        n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name in DROPPED
    ]
    rest = [n for n in tree.body if n not in inputs]
    # kept where the module's own code calls them (PLE and PointNet++, unseen8: Model.__init__
    # runs a calibration batch from get_inputs() for its BatchNorm statistics)
    used = {n.id for node in rest for n in ast.walk(node) if isinstance(n, ast.Name)}
    tree.body = [n for n in tree.body if n in rest or getattr(n, "name", "") in used]
    tree = _RenameModel().visit(tree)
    return ast.unparse(ast.fix_missing_locations(tree))


def indent(code: str, spaces: int = 4) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line.strip() else line for line in code.splitlines()) + "\n"


HELPERS = '''
def _kforge_clone(out):
    """Copy outputs out of buffers that the next call would overwrite (CUDA graphs)."""
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (list, tuple)):
        return type(out)(_kforge_clone(o) for o in out)
    return out


def _kforge_contiguous(out):
    if isinstance(out, torch.Tensor):
        return out.contiguous()
    if isinstance(out, (list, tuple)):
        return type(out)(_kforge_contiguous(o) for o in out)
    return out
'''


def render(task_source: str, spec: Spec, body: Body, runner_code: str, forward_code: str) -> str:
    """The whole candidate file."""
    parts = [
        f"# kforge embedded policy: strategy {spec.name}",
        reference_module(task_source),
        "import torch",
        HELPERS.strip("\n"),
    ]
    if body.prelude:
        parts.append(body.prelude.strip("\n"))
    klass = [f"class ModelNew({REFERENCE}):", indent(forward_code), indent(runner_code), indent(body.method)]
    parts.append("\n".join(k.rstrip("\n") for k in klass))
    return "\n\n\n".join(p.rstrip("\n") for p in parts) + "\n"
