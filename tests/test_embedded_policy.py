"""The embedded policy in the graph's roles: plan (features and ordered strategies), propose
(never the same source twice, a safe candidate in round 1, tuned winners later) and analyse
(the measured variants side by side); and a whole optimize run on the CPU with it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kforge.agent.policy.base import AttemptView, Context
from kforge.agent.policy.embedded import EmbeddedPolicy
from kforge.agent.policy.ranker_data import parse_features
from kforge.agent.run import optimize
from kforge.agent.settings import RunSettings
from kforge.agent.store import TrajectoryStore
from kforge.tools.hardware import spec_for
from kforge.tools.result import Result, Status, Timing
from kforge.tools.task import load_task, source_hash

pytestmark = pytest.mark.slow  # end to end: left out of the quick loop (-m 'not slow and not gpu')

FIXTURES = Path(__file__).parent / "fixtures" / "batch" / "tasks"
H100 = spec_for("H100-SXM")


def _timing(ms: float) -> Timing:
    return Timing(ms, ms, ms, 0.0, 10)


def _baseline(eager_ms: float, compile_ms: float) -> Result:
    return Result(
        status=Status.OK,
        device="cuda",
        candidate=_timing(eager_ms),
        eager=_timing(eager_ms),
        compiled=_timing(compile_ms),
    )


def _ctx(name: str, attempts=(), eager_ms=0.05, compile_ms=0.04, precision="fp32") -> Context:
    task = load_task(FIXTURES / f"{name}.py")
    return Context(
        task=task,
        hardware=H100,
        precision=precision,
        baseline=_baseline(eager_ms, compile_ms),
        docs=[],
        attempts=list(attempts),
    )


def _measured(proposal, index: int, ms: float | None, status=Status.OK) -> AttemptView:
    result = Result(
        status=status,
        device="cuda",
        candidate=_timing(ms) if ms else None,
        eager=_timing(0.05) if ms else None,
        log="Traceback\nRuntimeError: boom",
    )
    return AttemptView(f"r1-c{index}", 1, proposal.source, result, proposal.strategy)


def test_plan_orders_strategies_and_records_the_features():
    policy = EmbeddedPolicy()
    plan = policy.plan(_ctx("linear_sum"))
    assert "launch-bound" in plan and "fx-rewrite[sum-of-linear]" in plan
    features = parse_features(plan)
    assert features is not None and features.launches == 4 and features.eager_ms == 0.05


def test_round_one_has_a_safe_candidate_and_no_repeats():
    policy = EmbeddedPolicy(
        families=(
            "compile-max-autotune",
            "compile-max-autotune-no-cudagraphs",
            "cuda-graph",
            "compile-default",
        )
    )
    ctx = _ctx("scale_tanh", eager_ms=5.0, compile_ms=4.0)
    first = policy.propose(ctx, 2)
    assert any(p.strategy in ("compile-default", "cuda-graph") for p in first)
    seen = {source_hash(p.source) for p in first}
    attempts = [_measured(p, i, 0.04 - 0.01 * i) for i, p in enumerate(first)]
    for _ in range(4):
        more = policy.propose(_ctx("scale_tanh", attempts, eager_ms=5.0, compile_ms=4.0), 2)
        hashes = {source_hash(p.source) for p in more}
        assert not hashes & seen
        seen |= hashes
        attempts += [_measured(p, len(attempts) + i, 0.03) for i, p in enumerate(more)]


def test_later_rounds_tune_the_winner():
    policy = EmbeddedPolicy(families=("compile-default", "cuda-graph"))
    ctx = _ctx("scale_tanh")
    first = policy.propose(ctx, 2)
    winner = next(p for p in first if p.strategy == "compile-default")
    attempts = [_measured(p, i, 0.01 if p is winner else 0.05) for i, p in enumerate(first)]
    second = policy.propose(_ctx("scale_tanh", attempts), 2)
    assert second and second[0].strategy in (
        "cpp-wrapper+compile-default",
        "compile-default+cuda-graph",
        "compile-max-autotune-no-cudagraphs",
    )


def test_when_every_candidate_computed_another_answer_the_next_round_runs_eagers_kernels_first():
    """KernelBench's Mamba2 (L3 49): each torch.compile mode reordered sums of exponentials near
    1e13 past rtol 1e-4; a CUDA graph replays eager's own kernels, so it goes first next."""
    policy = EmbeddedPolicy()
    ctx = _ctx("scale_tanh", eager_ms=5.0, compile_ms=4.0)
    first = policy.propose(ctx, 3)
    assert "cuda-graph" not in [p.strategy for p in first], first  # else the test shows nothing
    wrong = [_measured(p, i, None, Status.INCORRECT) for i, p in enumerate(first)]
    second = policy.propose(_ctx("scale_tanh", wrong, eager_ms=5.0, compile_ms=4.0), 3)
    assert second and second[0].strategy == "cuda-graph", [p.strategy for p in second]
    # a crash is not a wrong answer: the ranker's order stays
    crashed = [_measured(p, i, None, Status.RUNTIME_ERROR) for i, p in enumerate(first)]
    again = policy.propose(_ctx("scale_tanh", crashed, eager_ms=5.0, compile_ms=4.0), 3)
    assert again and again[0].strategy != "cuda-graph", [p.strategy for p in again]
    # one verified candidate: its variants are tuned as before
    mixed = [*wrong[:2], _measured(first[2], 2, 0.03)]
    tuned = policy.propose(_ctx("scale_tanh", mixed, eager_ms=5.0, compile_ms=4.0), 3)
    assert tuned and tuned[0].strategy != "cuda-graph", [p.strategy for p in tuned]


def test_random_tasks_get_no_candidates_and_dropout_in_eval_mode_is_not_random(tmp_path: Path):
    policy = EmbeddedPolicy()
    ctx = _ctx("dropout_linear")
    assert "draws random numbers" in policy.plan(ctx)
    assert policy.propose(ctx, 3) == []
    # kforge model writes regions in inference mode (self.eval()): GPT-2's MLP ends in Dropout(0.1)
    source = (FIXTURES / "dropout_linear.py").read_text()
    eval_mode = source.replace("nn.Dropout(0.5)", "nn.Dropout(0.5)\n        self.eval()")
    (tmp_path / "dropout_eval.py").write_text(eval_mode)
    ctx.task = load_task(tmp_path / "dropout_eval.py")
    assert "draws random numbers" not in policy.plan(ctx)
    assert policy.propose(ctx, 3) != []


def test_analysis_names_the_winner_the_margin_and_the_failures():
    policy = EmbeddedPolicy(families=("compile-default", "cuda-graph", "compile-reduce-overhead"))
    proposals = policy.propose(_ctx("scale_tanh"), 3)
    new = [
        _measured(proposals[0], 0, 0.01),
        _measured(proposals[1], 1, 0.02),
        _measured(proposals[2], 2, None, Status.RUNTIME_ERROR),
    ]
    text = policy.analyse(_ctx("scale_tanh", new), new)
    assert f"Winner: {proposals[0].strategy}" in text and "2.00x faster than the runner-up" in text
    assert "runtime_error: RuntimeError: boom" in text


@pytest.fixture
def _cache(cache_dir, monkeypatch):
    monkeypatch.setenv("KFORGE_CACHE", str(cache_dir))
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "KFORGE_MODEL"):
        monkeypatch.delenv(var, raising=False)


def test_optimize_without_an_endpoint_uses_the_embedded_policy(tmp_path, _cache, monkeypatch):
    # The CPU offers compile-default besides the rewrite; keep the run fast without it.
    import kforge.agent.policy.embedded as embedded

    monkeypatch.setattr(embedded.EmbeddedPolicy, "__init__", _only_rewrites)
    settings = RunSettings(
        rounds=2, candidates=3, device="cpu", timing_trials=3, retrieval=False, out=tmp_path
    )
    summary = optimize(FIXTURES / "linear_sum.py", settings)
    assert summary.status == "finished"
    store = TrajectoryStore(summary.run_dir / "trajectories.db")
    assert store.run_info(summary.run_id)["policy"] == "embedded"
    (trajectory,) = store.trajectories(summary.run_id)
    assert trajectory.steps[0].attempt.strategy == "fx-rewrite[sum-of-linear]"
    assert trajectory.steps[0].result.status is Status.OK
    assert summary.best_path is not None and "ModelNew(_KforgeReference)" in summary.best_path.read_text()
    assert "Winner: fx-rewrite[sum-of-linear]" in trajectory.analyses[1]["critic"]


def _only_rewrites(self, ranker=None, *, use_ranker=True, families=None):
    self.ranker, self.families, self._analyses = None, ("fx-rewrite",), {}


def test_a_short_memory_bound_forward_is_not_launch_bound():
    """KernelBench L1 12 (one 0.054 ms multiply over 134 MB) was labelled launch-bound by its
    short eager time; the three CUDA-graph candidates it got ran at 0.44-0.49x (the graph's
    input copies double the traffic). Launch-bound now means launches take a large share."""
    from kforge.agent.policy.features import TaskFeatures

    multiply = TaskFeatures(launches=1, min_bytes=1.3e8, floor_ms=0.028, eager_ms=0.054)
    resnet18 = TaskFeatures(launches=108, floor_ms=0.108, eager_ms=1.64, bound="compute")
    assert not multiply.launch_bound
    assert resnet18.launch_bound and not resnet18.compute_bound
    assert TaskFeatures(launches=40, floor_ms=0.01).launch_bound  # no eager time: the floor decides


def test_max_autotune_is_skipped_where_autotuning_outlasts_an_evaluation():
    from kforge.agent.policy.features import TaskFeatures
    from kforge.agent.policy.strategies import compile_modes

    def families(launches: int) -> set[str]:
        features = TaskFeatures(launches=launches, ops={"convolution": launches}, conv_dims=2)
        return {s.family for s in compile_modes.specs(features, "cuda")}

    assert "compile-max-autotune" in families(245)  # MobileNetV2: max-autotune won, 2.2x
    assert {"compile-max-autotune", "compile-max-autotune-no-cudagraphs"}.isdisjoint(families(378))
    assert "compile-default" in families(378)


def test_max_autotune_keeps_cudnn_for_networks_of_many_convolutions():
    """KernelBench L3 AlexNet, GoogleNet, ResNet18, MobileNets, EfficientNet B0: max-autotune's
    Triton conv and GEMM templates (1x1 convolutions lower to GEMMs) ran past the evaluation
    limit. Above MAX_TEMPLATE_CONVS the candidate tells Inductor to benchmark neither; a task
    with a single conv still gets them."""
    import dataclasses

    import torch
    import torch._inductor.config as inductor
    from kforge.agent.policy.features import TaskFeatures
    from kforge.agent.policy.strategies import compile_modes, runners

    def autotuned(convs: int) -> list:
        features = TaskFeatures(launches=3 * convs, ops={"convolution": convs}, conv_dims=2)
        return [s for s in compile_modes.specs(features, "cuda") if "autotune" in s.mode]

    assert all(s.flags == () for s in autotuned(1))
    net = autotuned(20)
    assert [s.name for s in net] == [
        "aten-convs+compile-max-autotune-no-cudagraphs",
        "aten-convs+compile-max-autotune",
    ]
    assert {s.family for s in net} == {"compile-max-autotune-no-cudagraphs", "compile-max-autotune"}
    for spec in (net[1], dataclasses.replace(net[1], runner="compile-graph")):
        code = runners.runner_code(spec)
        assert code.index('max_autotune_conv_backends = "ATEN"') < code.index("torch.compile(")
    plain = runners.runner_code(autotuned(1)[0])
    assert "max_autotune_conv_backends" not in plain
    before = inductor.max_autotune_conv_backends, inductor.max_autotune_gemm_backends
    try:  # the emitted lines are real Inductor settings
        exec(runners.ATEN_CONVS.strip().replace("\n        ", "\n"), {"torch": torch})
        assert (inductor.max_autotune_conv_backends, inductor.max_autotune_gemm_backends) == ("ATEN", "ATEN")
    finally:
        inductor.max_autotune_conv_backends, inductor.max_autotune_gemm_backends = before


def test_the_attempt_the_user_chose_is_tuned_first_and_recorded_as_parent():
    policy = EmbeddedPolicy(families=("compile-default", "cuda-graph"))
    first = policy.propose(_ctx("scale_tanh"), 2)
    assert [p.parent for p in first] == ["", ""]  # round 1 builds on the task's own module
    winner = next(p for p in first if p.strategy == "compile-default")
    attempts = [_measured(p, i, 0.01 if p is winner else 0.05) for i, p in enumerate(first)]
    slower = next(a.attempt_id for a in attempts if a.strategy != "compile-default")
    assert policy.propose(_ctx("scale_tanh", attempts), 2)[0].parent != slower  # the winner by default
    ctx = _ctx("scale_tanh", attempts)
    ctx.base = slower
    assert policy.propose(ctx, 2)[0].parent == slower


@pytest.mark.parametrize("eager_ms, before", [(0.05, True), (5.0, False)])
def test_the_cpp_wrapper_goes_just_before_the_default_mode_where_a_call_is_short(eager_ms, before):
    """To a model with no trajectories of compile-cpp-wrapper (one fit before the family, given
    through KFORGE_RANKER), it is scored as compile-default (the same kernels), ahead of it
    where eager takes under HOST_BOUND_MS (host time is most of a call), behind it where not (a
    C++ build for little gain). The shipped model has learnt it: its own score is used."""
    import dataclasses

    from kforge.agent.policy.ranker import load_model

    shipped = load_model()
    assert "compile-cpp-wrapper" in shipped.weights
    older = dataclasses.replace(
        shipped, weights={f: w for f, w in shipped.weights.items() if f != "compile-cpp-wrapper"}
    )
    ctx = _ctx("scale_tanh", eager_ms=eager_ms, compile_ms=eager_ms)
    ordered = [s.family for s in EmbeddedPolicy(older).ordered(ctx)]
    cpp, default = ordered.index("compile-cpp-wrapper"), ordered.index("compile-default")
    assert abs(cpp - default) == 1 and (cpp < default) == before, ordered


@pytest.mark.parametrize(("batch", "graphs"), [(4096, False), (4, True)])
def test_no_cuda_graph_where_its_copies_of_gigabytes_cannot_win(tmp_path: Path, batch: int, graphs: bool):
    """A CUDA graph copies the inputs in and the outputs out on every call. On an H100, KernelBench's
    4 GB cumsum took 10.4 ms under reduce-overhead and 4.0 under compile, and its 7 GB
    InstanceNorm ran out of memory under a graph: past a GiB of a memory-bound forward of a few
    kernels no graph strategy is proposed, in the first round or as a tuning of a winner. The
    same forward at 4 MB keeps them."""
    source = (
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return torch.cumsum(torch.tanh(x) * 2, dim=1)\n\n\n"
        f"def get_inputs():\n    return [torch.rand({batch}, 262144)]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    (tmp_path / "cumsum_big.py").write_text(source)
    task = load_task(tmp_path / "cumsum_big.py")
    ctx = Context(
        task=task, hardware=H100, precision="fp32", baseline=_baseline(13.0, 3.5), docs=[], attempts=[]
    )
    policy = EmbeddedPolicy()
    ordered = policy.ordered(ctx)
    assert ordered and any(s.replays_graph for s in ordered) == graphs, [s.name for s in ordered]
    first = policy.propose(ctx, 3)
    attempts = [_measured(p, i, 3.0 + i) for i, p in enumerate(first)]
    ctx.attempts = attempts
    later = policy.propose(ctx, 3)
    names = [p.strategy for p in first + later]
    replays = [n for n in names if re.search(r"cuda-graph|reduce-overhead|max-autotune(?!-no-cudagraphs)", n)]
    assert later and bool(replays) == graphs, names
