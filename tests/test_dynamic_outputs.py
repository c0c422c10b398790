"""A forward whose shapes depend on its data (an MoE dispatch by ``torch.where``): the policy
offers no capture of the whole forward in a CUDA graph (it syncs on every call), and tunes a
winning default mode with Dynamo capturing those ops (``dynamic-outputs``); the candidate compiles without a graph break
where the plain default mode breaks and computes the reference; a wrong dispatch does not."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch._dynamo
import torch._dynamo.config
from kforge.agent.policy.features import task_features
from kforge.agent.policy.strategies import registry
from kforge.tools.evaluate import evaluate_many
from kforge.tools.result import Status
from kforge.tools.static_checks import static_cheats
from kforge.tools.task import load_task

TASKS = Path(__file__).parent / "fixtures" / "tasks"
MOE = TASKS / "moe_dispatch_small.py"
DYNAMIC = "dynamic-outputs+compile-default"


def _analysis(path: Path):
    task = load_task(path, check_import=False)
    analysis = registry.analyse_task(task, task_features(task, None, "fp32", None))
    return task, analysis, registry.base_specs(analysis, "fp32", "cuda")


def test_a_data_dependent_forward_gets_no_whole_forward_graph_and_the_dynamic_compile_as_tuning():
    _, analysis, specs = _analysis(MOE)
    assert analysis.features.data_dependent and "nonzero" in analysis.features.error
    assert DYNAMIC not in {s.name for s in specs}  # no gain measured (compile_modes): it tunes a winner
    plain = next(s for s in specs if s.name == "compile-default")
    assert DYNAMIC in [v.name for v in registry.variants(plain, analysis, "cuda")][:2]
    assert registry.family_of(DYNAMIC) == "compile-default"
    every = specs + [v for s in specs for v in registry.variants(s, analysis, "cuda")]
    assert not [s.name for s in every if s.runner in ("cuda-graph", "compile-graph")]
    assert "compile-reduce-overhead" in {s.name for s in specs}  # its trees capture between the breaks
    _, known, known_specs = _analysis(TASKS / "scale_relu.py")  # shapes known: as before
    default = next(s for s in known_specs if s.name == "compile-default")
    assert not known.features.data_dependent
    assert DYNAMIC not in {v.name for v in registry.variants(default, known, "cuda")}
    assert {"cuda-graph", "compile-default+cuda-graph"} <= {s.name for s in known_specs}


def _dynamic(specs, analysis):
    plain = next(s for s in specs if s.name == "compile-default")
    return next(v for v in registry.variants(plain, analysis, "cuda") if v.name == DYNAMIC)


def test_the_dynamic_candidate_compiles_in_one_graph_where_the_default_mode_breaks(load_source, monkeypatch):
    # the candidate sets Dynamo's flags in its own worker; here, in this process: restored after
    for flag in ("capture_dynamic_output_shape_ops", "capture_scalar_outputs"):
        monkeypatch.setattr(torch._dynamo.config, flag, getattr(torch._dynamo.config, flag))
    task, analysis, specs = _analysis(MOE)
    reference = load_source(MOE.read_text(), "ref_moe")
    torch.manual_seed(0)
    ref = reference.Model()
    x = reference.get_inputs()
    breaks = {}
    for name in ("compile-default", DYNAMIC):  # the plain one first: the flags stay set after
        spec = next(s for s in specs if s.name == name) if name != DYNAMIC else _dynamic(specs, analysis)
        new = load_source(
            registry.build(task, spec, analysis), f"cand_{name.replace('-', '_').replace('+', '_')}"
        )
        model = new.ModelNew()
        model.load_state_dict(ref.state_dict())
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        with torch.no_grad():
            torch.testing.assert_close(model(*x), ref(*x), rtol=1e-4, atol=1e-5)
        breaks[name] = sum(torch._dynamo.utils.counters["graph_break"].values())
    assert breaks["compile-default"] > 0 and breaks[DYNAMIC] == 0, breaks
    # the same flags on a wrong dispatch (the first choice's weight twice): not the reference
    wrong = registry.build(task, _dynamic(specs, analysis), analysis)
    wrong = wrong.replace("weights[token, slot, None]", "weights[token, 0, None]")
    model = load_source(wrong, "cand_moe_wrong").ModelNew()
    model.load_state_dict(ref.state_dict())
    torch._dynamo.reset()
    with torch.no_grad():
        assert not torch.allclose(model(*x), ref(*x), rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()


def test_the_dynamic_candidate_is_verified_by_the_engine(make_cpu_options):
    """In the sandboxed worker: Dynamo's flags set, the forward compiled with the data-dependent
    ops captured, checked against the reference like any candidate (a wrong dispatch under the
    same flags is caught in-process above; the evaluator's own checks have their tests)."""
    task, analysis, specs = _analysis(MOE)
    source = registry.build(task, _dynamic(specs, analysis), analysis)
    assert "capture_dynamic_output_shape_ops = True" in source
    assert static_cheats(source, task.source, "fp32") == []
    (good,) = evaluate_many(load_task(MOE), [source], make_cpu_options(trials=2, timing_trials=1))
    assert good.status == Status.OK and good.correct, good.log


@pytest.mark.parametrize(
    "code, dependent",
    [
        ("x[x > 0].sum()", True),  # a boolean mask: nonzero
        ("torch.repeat_interleave(x, (x > 0).long())", True),  # no output_size
        ("x * int(x.max())", True),  # a value read back
        ("torch.unique(x)", True),
        ("x.relu().sum()", False),
    ],
)
def test_which_forwards_are_data_dependent(tmp_path, code, dependent):
    path = tmp_path / "task.py"
    path.write_text(
        '"""probe"""\nimport torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n'
        f"    def forward(self, x):\n        return {code}\n\n\n"
        "def get_inputs():\n    return [torch.randn(64)]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    task = load_task(path, check_import=False)
    assert task_features(task, None, "fp32", None).data_dependent is dependent
