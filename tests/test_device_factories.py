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
GRID = TASKS / "host_factories_named_cpu.py"  # RAFT's grid: the factories name the CPU
FLAG = "device-factories"
GRAPH = "device-factories+cuda-graph"


def _analysis(path: Path):
    task = load_task(path, check_import=False)
    analysis = registry.analyse_task(task, task_features(task, None, "fp32", None))
    return task, analysis, registry.base_specs(analysis, "fp32", "cuda")


def _graph_candidate(path: Path):
    """(task, analysis, the source of its CUDA-graph candidate under the flag)."""
    task, analysis, specs = _analysis(path)
    return task, analysis, registry.build(task, next(s for s in specs if s.name == GRAPH), analysis)


def _pair(load_source, path: Path, source: str, name: str):
    """The task's Model and the candidate's ModelNew with the same weights, and the inputs."""
    reference = load_source(path.read_text(), f"ref_{name}")
    torch.manual_seed(0)
    ref = reference.Model()
    model = load_source(source, f"cand_{name}").ModelNew()
    model.load_state_dict(ref.state_dict())
    return ref, model, reference.get_inputs()


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


def _host_copies(module: torch.nn.Module, *inputs: torch.Tensor) -> int:
    """The copies from the CPU that ``module``'s forward makes with its inputs on another device."""
    counter, on_meta, moved = _OpCounter(), module.to("meta"), [x.to("meta") for x in inputs]
    with counter:
        on_meta(*moved)
    return counter.host_copies


class _Implicit(torch.nn.Module):
    """Copies the dispatcher makes without a ``.to``: SAM's relative positions indexed by
    ``torch.arange`` (its graph candidates failed capture so, 2026-11-28), a slice written from
    the CPU; a 0-dim CPU tensor beside them, which a CUDA op reads as a scalar."""

    def forward(self, table: torch.Tensor) -> torch.Tensor:
        rows = table[torch.arange(4)[:, None] - torch.arange(4)[None, :] + 3]  # (4, 4, C)
        out = torch.zeros_like(rows)
        out[0] = torch.ones(4, rows.shape[-1])
        return (rows + out) * torch.tensor(0.5)


def test_the_features_count_the_copies_an_index_or_a_write_from_the_cpu_makes(load_source):
    table = torch.randn(7, 3)
    assert _host_copies(_Implicit(), table) == 2
    fixture = TASKS / "decomposed_relpos_small.py"  # SAM's get_rel_pos, twice
    _, analysis, specs = _analysis(fixture)
    assert analysis.features.host_copies == 2
    graphs = [s for s in specs if s.replays_graph]
    assert graphs and all(FLAG in s.flags for s in graphs)
    _, _, source = _graph_candidate(fixture)
    ref, model, inputs = _pair(load_source, fixture, source, "relpos_copies")
    with torch.no_grad():
        assert _host_copies(ref, *inputs) == 2 and _host_copies(model, *inputs) == 0


def test_the_candidate_copies_nothing_from_the_host_and_computes_the_reference(load_source):
    task, _, source = _graph_candidate(FPS)
    assert static_cheats(source, task.source, "fp32") == []
    ref, model, (xyz,) = _pair(load_source, FPS, source, "fps")
    with torch.no_grad():
        torch.testing.assert_close(model(xyz), ref(xyz), rtol=0, atol=0)  # on the CPU: the same ops
        copies = {"reference": _host_copies(ref, xyz), "candidate": _host_copies(model, xyz)}
    assert copies == {"reference": 4, "candidate": 0}


def test_factories_that_name_the_cpu_are_made_on_the_inputs_device_too(load_source):
    task, analysis, source = _graph_candidate(GRID)
    assert analysis.features.host_copies == 2  # two aranges; the 0-dim torch.tensor is no copy
    assert static_cheats(source, task.source, "fp32") == []
    assert "_kforge_factories = _KforgeOnDevice(" in source
    ref, model, (fmap,) = _pair(load_source, GRID, source, "grid")
    with torch.no_grad():
        torch.testing.assert_close(model(fmap), ref(fmap), rtol=0, atol=0)
        assert _host_copies(ref, fmap) == 2 and _host_copies(model, fmap) == 0
    # torch.device alone leaves the named ones on the CPU: the copies RAFT's graphs failed on
    plain = load_source(
        source.replace("_kforge_factories = _KforgeOnDevice(", "_kforge_factories = ("), "cand_grid_plain"
    ).ModelNew()
    with torch.no_grad():
        assert _host_copies(plain, fmap) == 1  # the grid; linspace took the context's device


def test_the_mode_leaves_host_data_generators_and_pinned_buffers_and_restores_the_default(load_source):
    """Left on the CPU: a factory drawing from a generator; ``torch.tensor`` and its kin of one
    Python number, a 0-dim tensor that a CUDA op reads as a scalar (RAFT's ``torch.tensor(c)``:
    on the GPU, a copy that no graph captures), where a list is made on the device; a pinned
    buffer (Inductor's autotuner saves mutated arguments in one while the body runs:
    moved, RAFT's compiled graphs failed with "Only dense CPU tensors can be pinned")."""
    _, _, source = _graph_candidate(GRID)
    on_device = load_source(source, "cand_grid_mode")._KforgeOnDevice
    with on_device(torch.device("meta")):
        assert torch.zeros(2, device="cpu").device.type == "meta"
        assert torch.arange(3).device.type == "meta"
        assert torch.randn(2, generator=torch.Generator(), device="cpu").device.type == "cpu"
        for made in (
            torch.tensor(3.0),
            torch.as_tensor(2),
            torch.asarray(obj=1.0),
            torch.tensor(True, device="cpu"),
        ):
            assert made.device.type == "cpu" and made.dim() == 0
        for made in (
            torch.tensor([3.0]),
            torch.as_tensor([1, 2]),
            torch.asarray(obj=[1.0]),
            torch.tensor(()),
        ):
            assert made.device.type == "meta"
        try:  # moved, it would be a meta tensor (pinned meta memory is no error)
            pinned = torch.empty_strided((4,), (1,), device="cpu", pin_memory=True)
        except RuntimeError as err:  # no accelerator here to pin with: the call reached the CPU
            assert "pin" in str(err)
        else:
            assert pinned.device.type == "cpu"
    assert torch.zeros(2).device.type == "cpu"


def _helpers() -> dict:
    """The FX rewrites' table helper and the mode, as a candidate holds them."""
    from kforge.agent.policy.strategies import fx_constants, runners

    namespace: dict = {"torch": torch}
    exec(fx_constants.TABLE_HELPER + runners.ON_DEVICE_PRELUDE, namespace)  # noqa: S102 -- kforge's own text
    return namespace


def test_a_rewrite_s_table_is_built_once_where_the_factories_go():
    """RAFT's 9 x 9 grid of offsets, which the tracer folds into a table: built on the CPU
    and copied each call, its compiled graph failed capture (2026-11-28, after the pinned
    buffers were left alone). Under the mode it is built on the inputs' device, once."""
    helpers = _helpers()
    table, values = helpers["_kforge_table"], (1.0, 2.0, 3.0, 4.0)
    on_cpu = table(values, torch.float32, (2, 2))
    with helpers["_KforgeOnDevice"](torch.device("meta")):
        on_device = table(values, torch.float32, (2, 2))
        assert on_device.device.type == "meta" and table(values, torch.float32, (2, 2)) is on_device
    assert on_cpu.device.type == "cpu" and table(values, torch.float32, (2, 2)) is on_cpu
    assert torch.equal(on_cpu, torch.tensor([[1.0, 2.0], [3.0, 4.0]]))


def _traced(fn, *inputs):
    """Dynamo's graph of ``fn`` as a backend receives it (traced outside the mode, as a flagged
    compiled candidate runs), and its example inputs."""
    kept: list = []

    def keep(gm, example_inputs):
        kept.append((gm, example_inputs))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(fn, backend=keep, fullgraph=True)(*inputs)
    return kept[0]


def _made(gm) -> dict:
    return {n.target: n.kwargs.get("device") for n in gm.graph.nodes if n.op == "call_function"}


def test_a_compiled_body_s_factories_are_moved_before_inductor_sees_them(load_source):
    """RAFT's and SAM's compiled graphs, traced under the mode, still copied a grid and a table
    from the CPU each call and failed capture (2026-11-28, H200). A flagged compiled body runs
    outside the mode; the backend moves the factories of Dynamo's graph by the mode's rule."""
    helpers = _helpers()
    reference = load_source(GRID.read_text(), "ref_grid_moved")
    model = reference.Model().to("meta")
    gm, inputs = _traced(model, *(x.to("meta") for x in reference.get_inputs()))
    assert _host_copies(gm, *inputs) == 2  # as traced: the grid (aranges named CPU), the linspace
    helpers["_kforge_graph_on_device"](gm, inputs)
    assert _host_copies(gm, *inputs) == 0
    made = _made(gm)
    assert made[torch.arange] == torch.device("meta") and made[torch.linspace] == torch.device("meta")
    assert made[torch.tensor] is None  # the 0-dim scalar stays on the CPU
    # SAM's relative-position indices, a table of the FX rewrites: traced as torch.tensor(values)
    index = helpers["_kforge_table"]

    def rows(table: torch.Tensor) -> torch.Tensor:
        return table[index((2, 1, 0, 3, 2, 1), torch.int64, (2, 3))]

    gm, inputs = _traced(rows, torch.randn(4, 5, device="meta"))
    assert _host_copies(gm, *inputs) == 1
    helpers["_kforge_graph_on_device"](gm, inputs)
    assert _host_copies(gm, *inputs) == 0 and _made(gm)[torch.tensor] == torch.device("meta")


def test_the_flagged_compiled_candidates_go_through_inductor_with_their_mode_s_options(load_source):
    """Each compiled candidate under the flag runs outside the mode and names the backend with
    its mode's options; on the CPU (nothing to move) it compiles and computes the reference."""
    task, analysis, specs = _analysis(GRID)
    every = specs + [v for s in specs for v in registry.variants(s, analysis, "cuda")]
    compiled = [s for s in every if FLAG in s.flags and s.runner in ("compile", "compile-graph")]
    assert compiled
    for spec in compiled:
        source = registry.build(task, spec, analysis)
        assert "backend=_kforge_inductor_on_device(" in source and "mode=" not in source, spec.name
        assert f"_kforge_mode_options({spec.mode!r})" in source or "_kforge_nchw(" in source, spec.name
        assert "with _kforge_factories" not in source, spec.name
    helpers = _helpers()
    reference = load_source(GRID.read_text(), "ref_grid_inductor")
    model = reference.Model()
    (fmap,) = reference.get_inputs()
    torch._dynamo.reset()
    backend = helpers["_kforge_inductor_on_device"](helpers["_kforge_mode_options"]("default"))
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend=backend)(fmap), model(fmap))


def _only_the_flagged_captures(path: Path, flagged: str, plain: str, make_gpu_options) -> None:
    """On the GPU the flagged candidate verifies and the same without the fix fails capture."""
    from kforge.tools.evaluate import evaluate_many
    from kforge.tools.result import Status

    results = evaluate_many(load_task(path), [flagged, plain], make_gpu_options(compile_baseline=False))
    assert results[0].status is Status.OK, results[0].log[-2000:]
    assert results[1].status is not Status.OK and "during CUDA graph capture" in results[1].log


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_compiled_graph_of_a_forward_naming_the_cpu_captures(tmp_path, make_gpu_options):
    """RAFT's and SAM's compiled graph candidates (2026-11-28, H200): under the mode alone,
    Inductor's copy of the CPU-made grid failed capture; through the backend it captures."""
    task, analysis, specs = _analysis(GRID)
    spec = next(s for s in specs if s.name == "device-factories+compile-default+cuda-graph")
    flagged = registry.build(task, spec, analysis)
    plain = flagged.replace(
        "backend=_kforge_inductor_on_device(_kforge_mode_options('default'))", "mode='default'"
    )
    assert plain != flagged
    _only_the_flagged_captures(GRID, flagged, plain, make_gpu_options)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_only_the_flagged_graph_captures(tmp_path, make_gpu_options):
    _, _, flagged = _graph_candidate(FPS)
    plain = flagged.replace("with _kforge_factories:", "if True:")
    _only_the_flagged_captures(FPS, flagged, plain, make_gpu_options)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_graph_of_a_forward_naming_the_cpu_captures(tmp_path, make_gpu_options):
    """RAFT's failure (2026-11-28, H200): both graph candidates under ``torch.device`` failed
    capture on the grid made with ``device="cpu"``."""
    _, _, flagged = _graph_candidate(GRID)
    plain = flagged.replace("_kforge_factories = _KforgeOnDevice(", "_kforge_factories = (")
    _only_the_flagged_captures(GRID, flagged, plain, make_gpu_options)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_a_rewrite_s_table_and_a_scalar_tensor_are_captured():
    """RAFT's forward as the FX rewrites write it: a table then ``.to(device)``, and
    ``torch.sqrt(torch.tensor(c))``; under the mode, after one warm-up call, the graph captures
    no copy from the host and replays the same answer."""
    helpers = _helpers()
    values = tuple(float(v) for v in range(6))
    x = torch.randn(2, 3, device="cuda")

    def body(x: torch.Tensor) -> torch.Tensor:
        return (
            x
            * helpers["_kforge_table"](values, torch.float32, (2, 3)).to(x.device)
            / torch.sqrt(torch.tensor(4))
        )

    with helpers["_KforgeOnDevice"](x.device):
        warm = body(x)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = body(x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, warm)
