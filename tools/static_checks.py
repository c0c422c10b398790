"""Cheats visible in a candidate's source, found before anything runs."""

from __future__ import annotations

import ast
import copy
import re

# Patterns that lower precision, by the precision class that allows them. Whole words only:
# "bfloat16" is not a use of "float16", and switching TF32 *off* is not a use of TF32.
LOWER_PRECISION_PATTERNS: dict[str, tuple[str, ...]] = {
    "tf32": (
        r"allow_tf32\s*=\s*True",
        r"set_float32_matmul_precision\(\s*['\"](high|medium)",
        r"\btf32\b",
    ),
    "bf16": (r"\bbfloat16\b", r"\b__nv_bfloat16\w*", r"\bautocast\b"),
    "fp16": (r"\bfloat16\b", r"\b__half\w*", r"\bhalf2\b", r"\.half\(\)", r"\bautocast\b"),
}
ALLOWED_BY_CLASS = {
    "fp32": set(),
    "tf32": {"tf32"},
    "bf16": {"tf32", "bf16"},
    "fp16": {"tf32", "fp16"},
}
C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
TIMER_TARGETS = re.compile(r"^(time|torch\.cuda|torch\.cuda\.Event|torch\.cuda\.Stream|triton\.testing)\.")


def static_cheats(candidate_source: str, task_source: str, precision: str) -> list[str]:
    """Reasons to reject ``candidate_source`` without running it (empty when none)."""
    tree = ast.parse(candidate_source)
    reasons: list[str] = []
    reasons += _try_in_functions(tree)
    reasons += _evaluator_reach(tree)
    reasons += _reference_model_use(tree)
    reasons += _timer_patching(tree)
    reasons += _precision_tokens(_code_text(tree), task_source, precision)
    reasons += _tf32_dots(tree, precision)
    return reasons


def _try_in_functions(tree: ast.AST) -> list[str]:
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(func):
                if isinstance(node, ast.Try | ast.TryStar):
                    return [f"try/except in {func.name}(): a fallback path may hide a failing kernel"]
    return []


# Reaching for what judges a candidate: behind the process boundary none of it finds the judge,
# and no honest kernel needs it, so each is a named reason of its own.
EVALUATOR_MODULES = ("kforge",)
# kforge's own kernels, which a candidate may call (the hgemm-tuned, tf32x3 and triton-template
# strategies' do): these modules and what they define, not the rest of tools/gemm/ (the search
# and its timer) or of tools/.
KERNEL_LIBRARIES = (
    "kforge.gemm",
    "kforge.tools.gemm.config",
    "kforge.tools.gemm.kernels",
    "kforge.tools.gemm.tma",
    "kforge.tools.gemm.cuda",
    "kforge.tools.gemm.cublaslt",
    "kforge.tools.gemm.dispatch",
    "kforge.tools.gemm.tf32x3",
    "kforge.tools.gemm.attention",
    "kforge.tools.gemm.conv",
    "kforge.tools.norms",
    "kforge.tools.losses",
    "kforge.tools.softmax",
    "kforge.tools.depthwise",
    "kforge.tools.rotary",
)
REACH_ATTRIBUTES = {
    "modules": "reads sys.modules (the task's or kforge's modules)",
    "_current_frames": "introspects the evaluator (frames of other threads)",
    "currentframe": "introspects the evaluator (frames)",
    "f_back": "introspects the evaluator (caller frames)",
    "f_locals": "introspects the evaluator (a frame's variables)",
    "f_globals": "introspects the evaluator (a frame's globals)",
    "__globals__": "reads a function's module globals (another module's names)",
    "getppid": "reaches for its parent process",
    "kill": "signals other processes",
    "killpg": "signals other processes",
    "suppress": "contextlib.suppress: a fallback path may hide a failing kernel",
}
REACH_MODULES = {"atexit": "registers exit hooks (code that runs after the evaluation)"}


def _kernel_library(name: str) -> bool:
    """``name`` is one of KERNEL_LIBRARIES or inside one (not merely a name that starts alike)."""
    return any(name == lib or name.startswith(lib + ".") for lib in KERNEL_LIBRARIES)


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value)
        return f"{owner}.{node.attr}" if owner is not None else None
    return None


def _outside_kernel_libraries(name: str) -> bool:
    """A kforge name that is neither a kernel library, inside one, nor on the way to one
    (``kforge``, ``kforge.tools``): after ``import kforge.tools.norms`` the name ``kforge`` is
    bound, and ``kforge.tools.timing`` reaches the evaluator through it."""
    if name.split(".")[0] not in EVALUATOR_MODULES or _kernel_library(name):
        return False
    return not any(lib.startswith(name + ".") for lib in KERNEL_LIBRARIES)


def _evaluator_reach(tree: ast.AST) -> list[str]:
    reasons = []
    aliases = _import_aliases(tree)
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            if node.module == "contextlib" and any(a.name == "suppress" for a in node.names):
                reasons.append(REACH_ATTRIBUTES["suppress"])
        for name in names:
            root = name.split(".")[0]
            if root in EVALUATOR_MODULES and not _kernel_library(name):
                reasons.append(f"imports kforge's own modules ({name}): the evaluator")
            if root in REACH_MODULES:
                reasons.append(REACH_MODULES[root])
        dotted = _dotted(node) if isinstance(node, ast.Attribute) else None
        if dotted is not None and _outside_kernel_libraries(name := _resolve(dotted, aliases)):
            if not _outside_kernel_libraries(name.rsplit(".", 1)[0]):  # where the chain leaves them
                reasons.append(f"reaches kforge's own modules ({name}): the evaluator")
        if isinstance(node, ast.Attribute) and node.attr in REACH_ATTRIBUTES:
            # the owner by its last name: sys.modules, and also lib.os.sys.modules, m.os.kill or
            # g["os"].sys.modules through a module that imported them
            value = node.value
            owner = value.attr if isinstance(value, ast.Attribute) else getattr(value, "id", "")
            if node.attr in ("modules", "kill", "killpg", "getppid", "suppress") and owner not in (
                "sys",
                "os",
                "contextlib",
                "signal",
            ):
                continue  # self.modules, a helper named kill: not the process-level functions
            reasons.append(REACH_ATTRIBUTES[node.attr])
    return list(dict.fromkeys(reasons))


def _reference_model_use(tree: ast.AST) -> list[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "Model":
            return ["refers to the reference Model"]
        if isinstance(node, ast.ImportFrom) and any(alias.name == "Model" for alias in node.names):
            return [f"imports the reference Model (from {node.module})"]
        if isinstance(node, ast.Attribute) and node.attr == "Model":
            return ["refers to the reference Model"]
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("get_objects", "_getframe", "stack")
            and (isinstance(node.value, ast.Name) and node.value.id in ("gc", "sys", "inspect"))
        ):
            return [f"introspects the evaluator ({node.value.id}.{node.attr})"]
    return []


def _timer_patching(tree: ast.AST) -> list[str]:
    aliases = _import_aliases(tree)
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            targets = node.args[:1]
        for target in targets:
            name = _resolve(ast.unparse(target), aliases)
            if isinstance(target, ast.Attribute) and TIMER_TARGETS.match(name + "."):
                return [f"patches a timer or synchronisation function ({name})"]
            if isinstance(node, ast.Call) and TIMER_TARGETS.match(name + "."):
                return [f"patches a timer or synchronisation function (setattr on {name})"]
    return []


def _import_aliases(tree: ast.AST) -> dict[str, str]:
    """Local names bound to modules or their members: ``import time as t`` gives
    {"t": "time"}, ``from torch.cuda import Event`` gives {"Event": "torch.cuda.Event"}."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _resolve(name: str, aliases: dict[str, str]) -> str:
    root, dot, rest = name.partition(".")
    return aliases[root] + dot + rest if root in aliases else name


def _precision_tokens(candidate_code: str, task_source: str, precision: str) -> list[str]:
    allowed = ALLOWED_BY_CLASS.get(precision, set())
    found: set[str] = set()
    for cls, patterns in LOWER_PRECISION_PATTERNS.items():
        if cls in allowed:
            continue
        for pattern in patterns:
            match = re.search(pattern, candidate_code)
            if match and not re.search(pattern, task_source):
                found.add(match.group(0))
    if found:
        return [f"precision lowered below {precision}: uses {', '.join(sorted(found))}"]
    return []


def _code_text(tree: ast.Module) -> str:
    """The candidate's code without comments and docstrings, C++ comments in its strings
    removed too: prose that mentions fp16 is not a use of fp16."""
    tree = copy.deepcopy(tree)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                body[0] = ast.Pass()
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = C_COMMENT.sub("", node.value)
    return ast.unparse(tree)


def _tf32_dots(tree: ast.AST, precision: str) -> list[str]:
    """Under strict fp32 a Triton dot must ask for IEEE fp32 or for 3xTF32 (fp32 accuracy on
    tensor cores: the float64 error check still bounds it); its default is one TF32 pass."""
    if precision != "fp32":
        return []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "dot":
            if not (isinstance(node.func.value, ast.Name) and node.func.value.id in ("tl", "triton")):
                continue
            kwargs = {kw.arg: _constant(kw.value) for kw in node.keywords}
            ieee = kwargs.get("input_precision") in ("ieee", "tf32x3")
            no_tf32 = kwargs.get("allow_tf32") is False
            if not (ieee or no_tf32):
                return [
                    "precision lowered below fp32: tl.dot without input_precision='ieee' (or 'tf32x3') uses TF32"
                ]
    return []


def _constant(node: ast.expr) -> object:
    return node.value if isinstance(node, ast.Constant) else None
