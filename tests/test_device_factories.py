"""A forward that makes tensors on the CPU and copies them to its inputs' device
(``torch.zeros(b, n).to(device)``: PointNet++'s sampling loop and RAFT's coordinate grid in
unseen8, where every CUDA-graph candidate failed: a copy from pageable host memory cannot be
captured). The features count such copies; every candidate that replays a graph then runs its
body under ``torch.device`` of its inputs (``device-factories``), which makes the same tensors
where they are used: no copy is left, the answer is the same, and the ranker sees the family
without the flag."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from kforge.agent.policy.features import _OpCounter, task_features
from kforge.agent.policy.strategies import registry
from kforge.tools.static_checks import static_cheats
from kforge.tools.task import load_task

TASKS = Path(__file__).parent / "fixtures" / "tasks"
FPS = TASKS / "host_factories_small.py"
FLAG = "device-factories"


def _analysis(path: Path):
    task = load_task(path, check_import=False)
    analysis = registry.analyse_task(task, task_features(task, None, "fp32", None))
    return task, analysis, registry.base_specs(analysis, "fp32", "cuda")


def test_graph_candidates_make_the_forward_s_tensors_on_its_device():
    _, analysis, specs = _analysis(FPS)
    assert analysis.features.host_copies == 4  # zeros, ones, zeros, arange
    every = specs + [v for s in specs for v in registry.variants(s, analysis, "cuda")]
    graphs = [s for s in every if s.replays_graph]
    assert {"device-factories+cuda-graph", "device-factories+compile-default+cuda-graph"} <= {
        s.name for s in graphs
    }
    assert all(FLAG in s.flags for s in graphs)
    assert not [s.name for s in every if FLAG in s.flags and not s.replays_graph]
    assert registry.family_of("device-factories+cuda-graph") == "cuda-graph"
    assert registry.family_of("device-factories+compile-default+cuda-graph") == "compile-graph"
    _, plain, plain_specs = _analysis(TASKS / "scale_relu.py")  # nothing made on the CPU: as before
    assert plain.features.host_copies == 0 and not [s for s in plain_specs if FLAG in s.flags]


def test_the_candidate_copies_nothing_from_the_host_and_computes_the_reference(load_source):
    task, analysis, specs = _analysis(FPS)
    spec = next(s for s in specs if s.name == "device-factories+cuda-graph")
    source = registry.build(task, spec, analysis)
    assert static_cheats(source, task.source, "fp32") == []
    reference = load_source(FPS.read_text(), "ref_fps")
    torch.manual_seed(0)
    ref = reference.Model()
    model = load_source(source, "cand_fps").ModelNew()
    model.load_state_dict(ref.state_dict())
    (xyz,) = reference.get_inputs()
    with torch.no_grad():
        torch.testing.assert_close(model(xyz), ref(xyz), rtol=0, atol=0)  # on the CPU: the same ops
        copies = {}
        for name, module in (("reference", ref), ("candidate", model)):  # the inputs on another device
            counter, on_meta, points = _OpCounter(), module.to("meta"), xyz.to("meta")
            with counter:
                on_meta(points)
            copies[name] = counter.host_copies
    assert copies == {"reference": 4, "candidate": 0}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_only_the_flagged_graph_captures(tmp_path, make_gpu_options):
    from kforge.tools.evaluate import evaluate_many
    from kforge.tools.result import Status

    task, analysis, specs = _analysis(FPS)
    flagged = next(s for s in specs if s.name == "device-factories+cuda-graph")
    plain = registry.build(task, flagged, analysis).replace("with _kforge_factories:", "if True:")
    results = evaluate_many(
        load_task(FPS),
        [registry.build(task, flagged, analysis), plain],
        make_gpu_options(compile_baseline=False),
    )
    assert results[0].status is Status.OK, results[0].log[-2000:]
    assert results[1].status is not Status.OK and "during CUDA graph capture" in results[1].log
