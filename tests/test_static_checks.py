"""The static cheat scan: no false positives on honest candidates, each static cheat caught,
and the dynamic cheats invisible to it (so the runtime guards are what catches them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kforge.examples import catalog_pairs
from kforge.tools.static_checks import KERNEL_LIBRARIES, static_cheats

FIXTURE_TASK_SOURCE = (Path(__file__).parent / "fixtures" / "tasks" / "scale_relu.py").read_text()

HONEST_FIXTURES = [
    ("candidates/scale_relu_torch.py", "scale_relu"),
    ("candidates/scale_relu_triton.py", "scale_relu"),
    ("candidates/matmul_small_torch.py", "matmul_small"),
    ("candidates/softmax_wide_torch.py", "softmax_wide"),
    ("candidates/slow_reference_torch.py", "slow_reference"),
    ("candidates/env_probe.py", "scale_relu"),
    ("candidates/not_written.py", "scale_relu"),
    ("candidates/illegal_memory_access.py", "scale_relu"),
]
# Cheats found only at run time: the static scan must not be what the tests rely on.
DYNAMIC_CHEATS = [
    ("cheats/patched_timer_dynamic.py", "scale_relu"),
    ("cheats/patched_compare.py", "scale_relu"),
    ("cheats/timing_aware.py", "scale_relu"),
    ("judge/forge_result_file.py", "scale_relu"),
    ("judge/patch_judge_compare.py", "scale_relu"),
    ("judge/patch_judge_clock.py", "matmul_heavy"),
    ("judge/lazy_checksum.py", "matmul_heavy"),
    ("judge/corrupt_randn.py", "scale_relu"),
    ("judge/slow_baseline.py", "matmul_heavy"),
    ("cheats/precision_tf32.py", "matmul_small"),
    ("cheats/precision_bf16.py", "softmax_wide"),
    ("cheats/precision_behind_tf32x3.py", "matmul_small"),
    ("cheats/precision_behind_kforge_kernel.py", "matmul_small"),
    ("cheats/precision_behind_kforge_attention.py", "attention_small"),
    ("cheats/precision_behind_kforge_conv.py", "conv_bn_relu"),
    ("cheats/cache_across_calls.py", "scale_relu"),
    ("cheats/background_thread.py", "scale_relu"),
    ("cheats/side_stream.py", "scale_relu_big"),
]
STATIC_CHEATS = [
    (
        "cheats/patched_event.py",
        "patches a timer or synchronisation function (torch.cuda.Event.elapsed_time)",
    ),
    ("cheats/calls_reference_gc.py", "introspects the evaluator (gc.get_objects)"),
    ("cheats/try_fallback.py", "try/except in forward()"),
    ("cheats/clock_through_kernel_library.py", "reaches kforge's own modules (kforge.tools.timing)"),
    ("cheats/sys_modules_through_kernel_library.py", "reads sys.modules"),
    ("cheats/sys_modules_through_library_globals.py", "reads a function's module globals"),
    ("cheats/sys_modules_through_library_globals.py", "reads sys.modules"),
]


def example_pairs() -> list[tuple[Path, Path]]:
    """(candidate, task) pairs of examples/, from its catalog."""
    return [(cand, task) for task, cand in catalog_pairs()]


def fixture_task_source(name: str) -> str:
    return (Path(__file__).parent / "fixtures" / "tasks" / f"{name}.py").read_text()


@pytest.mark.parametrize(("relative", "task"), HONEST_FIXTURES)
def test_no_false_positive_on_honest_fixtures(
    fixture_source: Callable[[str], str], relative: str, task: str
) -> None:
    assert static_cheats(fixture_source(relative), fixture_task_source(task), "fp32") == []


@pytest.mark.parametrize(
    ("candidate", "task"),
    example_pairs() or [pytest.param(None, None, marks=pytest.mark.skip("no examples"))],
)
def test_no_false_positive_on_example_candidates(candidate: Path, task: Path) -> None:
    assert static_cheats(candidate.read_text(), task.read_text(), "fp32") == []


@pytest.mark.parametrize(("relative", "task"), DYNAMIC_CHEATS)
def test_dynamic_cheats_are_invisible_to_the_scan(
    fixture_source: Callable[[str], str], relative: str, task: str
) -> None:
    assert static_cheats(fixture_source(relative), fixture_task_source(task), "fp32") == []


@pytest.mark.parametrize(("relative", "reason"), STATIC_CHEATS)
def test_static_cheat_fixtures_are_caught(
    fixture_source: Callable[[str], str], relative: str, reason: str
) -> None:
    reasons = static_cheats(fixture_source(relative), FIXTURE_TASK_SOURCE, "fp32")
    assert any(reason in r for r in reasons), reasons


MODULE = "import time\nimport gc\nimport sys\nimport inspect\nimport torch\nimport triton.language as tl\n"


@pytest.mark.parametrize(
    ("snippet", "phrase"),
    [
        (
            "def forward(x):\n    try:\n        return k(x)\n    except RuntimeError:\n        return x\n",
            "try/except",
        ),
        (
            "class C:\n    async def f(self):\n        try:\n            pass\n        finally:\n            pass\n",
            "try/except in f()",
        ),
        ("ref = sys.modules['kforge_task'].Model\n", "refers to the reference Model"),
        ("frame = sys._getframe(1)\n", "introspects the evaluator (sys._getframe)"),
        ("callers = inspect.stack()\n", "introspects the evaluator (inspect.stack)"),
        (
            "time.perf_counter = lambda: 0.0\n",
            "patches a timer or synchronisation function (time.perf_counter)",
        ),
        ("torch.cuda.synchronize = lambda *a: None\n", "(torch.cuda.synchronize)"),
        ("torch.cuda.Stream.wait_stream = lambda *a: None\n", "(torch.cuda.Stream.wait_stream)"),
        ("setattr(time, 'perf_counter', lambda: 0.0)\n", "setattr on time"),
        ("setattr(torch.cuda.Event, 'elapsed_time', lambda s, e: 0.0)\n", "(torch.cuda.Event)"),
        ("x = torch.ones(3, dtype=torch.bfloat16)\n", "uses bfloat16"),
        ("x = torch.ones(3).half()\n", "uses .half()"),
        ("x = torch.ones(3, dtype=torch.float16)\n", "uses float16"),
        ("with torch.autocast('cuda'):\n    pass\n", "autocast"),
        ("torch.backends.cuda.matmul.allow_tf32 = True\n", "precision lowered below fp32: uses allow_tf32"),
        ("torch.set_float32_matmul_precision('high')\n", "set_float32_matmul_precision"),
        ("SRC = '__global__ void k(__half* y) { }'\n", "uses __half"),
        ("def k(a, b):\n    return tl.dot(a, b)\n", "tl.dot without input_precision='ieee'"),
        ("def k(a, b):\n    return tl.dot(a, b, input_precision='tf32')\n", "precision lowered below fp32"),
    ],
)
def test_static_cheats_caught(snippet: str, phrase: str) -> None:
    reasons = static_cheats(MODULE + snippet, FIXTURE_TASK_SOURCE, "fp32")
    assert any(phrase in r for r in reasons), reasons


@pytest.mark.parametrize(
    "snippet",
    [
        "def k(a, b):\n    return tl.dot(a, b, input_precision='ieee')\n",
        "def k(a, b, acc):\n    return tl.dot(a, b, acc, input_precision='ieee')\n",
        "def k(a, b, acc):\n    return tl.dot(a, b, acc, input_precision='tf32x3')\n",  # fp32 accuracy
        'class K:\n    """Faster than the bfloat16 path, this kernel keeps float16 out."""\n',
        "def f():\n    '''No autocast here, no .half() either.'''\n    return 1\n",
        "SRC = '''\n// we avoid __half and __nv_bfloat16 here\n/* tf32 is off */\n__global__ void k(float* y) {}\n'''\n",
        "# a comment about bfloat16 and tf32\nx = 1\n",
        "stream = torch.cuda.Stream()\nevent = torch.cuda.Event(enable_timing=True)\n",
        "start = time.perf_counter()\nmodel_name = 'resnet'\n",
        "try:\n    import cupy\nexcept ImportError:\n    cupy = None\n",  # module level: not a fallback path
    ],
)
def test_no_false_positive_on_honest_snippets(snippet: str) -> None:
    assert static_cheats(MODULE + snippet, FIXTURE_TASK_SOURCE, "fp32") == []


@pytest.mark.parametrize(
    "snippet",
    [
        "def k(a, b):\n    return tl.dot(a, b, allow_tf32=False)\n",
        "torch.backends.cuda.matmul.allow_tf32 = False\n",
    ],
)
def test_switching_tf32_off_is_not_a_cheat(snippet: str) -> None:
    assert static_cheats(MODULE + snippet, FIXTURE_TASK_SOURCE, "fp32") == []


@pytest.mark.parametrize(
    ("snippet", "precision", "flagged"),
    [
        ("x = torch.ones(3, dtype=torch.bfloat16)\n", "tf32", True),
        ("x = torch.ones(3, dtype=torch.bfloat16)\n", "fp16", True),
        ("x = torch.ones(3).half()\n", "fp16", False),
        ("x = torch.ones(3).half()\n", "bf16", True),
        ("torch.backends.cuda.matmul.allow_tf32 = True\n", "tf32", False),
        ("torch.backends.cuda.matmul.allow_tf32 = True\n", "bf16", False),
        ("def k(a, b):\n    return tl.dot(a, b)\n", "tf32", False),
    ],
)
def test_precision_tokens_follow_the_class(snippet: str, precision: str, flagged: bool) -> None:
    reasons = static_cheats(MODULE + snippet, FIXTURE_TASK_SOURCE, precision)
    assert bool(reasons) == flagged, reasons


def test_bfloat16_is_allowed_under_bf16() -> None:
    assert (
        static_cheats(MODULE + "x = torch.ones(3, dtype=torch.bfloat16)\n", FIXTURE_TASK_SOURCE, "bf16") == []
    )


def test_importing_the_reference_model_is_caught() -> None:
    assert static_cheats(MODULE + "from kforge_task import Model as Ref\n", FIXTURE_TASK_SOURCE, "fp32")


def test_tokens_the_task_itself_uses_are_allowed() -> None:
    task = FIXTURE_TASK_SOURCE + "\nDTYPE = torch.float16\n"
    assert static_cheats(MODULE + "x = torch.ones(3, dtype=torch.float16)\n", task, "fp32") == []


@pytest.mark.parametrize(
    "snippet",
    [
        "import time as t\nt.perf_counter = lambda: 0.0\n",
        "from torch.cuda import Event\nEvent.elapsed_time = lambda a, b: 0.001\n",
        "from torch import cuda\ncuda.synchronize = lambda: None\n",
    ],
)
def test_timer_patches_through_import_aliases_are_caught(snippet: str) -> None:
    reasons = static_cheats(MODULE + snippet, FIXTURE_TASK_SOURCE, "fp32")
    assert any("patches a timer" in r for r in reasons), reasons


def test_using_an_imported_timer_is_not_patching_it() -> None:
    snippet = "from time import perf_counter\nstart = perf_counter()\n"
    assert static_cheats(MODULE + snippet, FIXTURE_TASK_SOURCE, "fp32") == []


@pytest.mark.parametrize("library", KERNEL_LIBRARIES)
def test_every_kernel_library_candidates_may_import_is_no_way_to_the_evaluator(library: str) -> None:
    """Importing any library on the allowed list (the depthwise template, added 2026-11-26,
    among them) is accepted, but through the name it binds kforge's clock and judge stay out
    of reach: a candidate that patches them after the import is caught statically."""
    imported = f"import {library}\n"
    assert static_cheats(MODULE + imported, FIXTURE_TASK_SOURCE, "fp32") == []
    for reach in ("kforge.tools.timing._perf_counter = lambda: 0.0\n", "judge = kforge.tools.judge\n"):
        reasons = static_cheats(MODULE + imported + reach, FIXTURE_TASK_SOURCE, "fp32")
        assert any("reaches kforge's own modules" in r for r in reasons), (library, reach, reasons)
