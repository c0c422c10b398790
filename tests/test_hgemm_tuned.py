"""The ``hgemm-tuned`` embedded strategy: a task ``kforge gemm`` writes matches it, its
candidate (the tuned Triton GEMM, under Triton's interpreter on the CPU) passes the fp16
check in an optimize run while the same file with an fp16 accumulator fails it, winners are tuned with the next
configs, and a whole optimize run reaches it through the graph."""

from __future__ import annotations

from pathlib import Path

import pytest
from kforge.agent.policy.features import task_features
from kforge.agent.policy.strategies import hgemm_tuned, registry
from kforge.tools.evaluate import evaluate_many
from kforge.tools.gemm.kernels import HgemmConfig
from kforge.tools.gemm.tasks import write_tasks
from kforge.tools.result import Status
from kforge.tools.static_checks import static_cheats
from kforge.tools.task import load_task

FIXTURES = Path(__file__).parent / "fixtures" / "batch" / "tasks"
SHAPE = (32, 16, 768)  # K long enough (24 blocks of 32) for an fp16 accumulator to show


@pytest.fixture
def gemm_task(tmp_path: Path) -> Path:
    (task,) = write_tasks({SHAPE: HgemmConfig(16, 16, 32)}, tmp_path / "tasks")
    return task


def _analysis(path: Path, device: str = "cpu"):
    task = load_task(path, check_import=False)
    analysis = registry.analyse_task(task, task_features(task, None, "fp16", None))
    return task, analysis, registry.base_specs(analysis, "fp16", device)


def test_only_an_fp16_matmul_of_the_two_inputs_matches(gemm_task: Path):
    _, analysis, specs = _analysis(gemm_task)
    assert analysis.hgemm == SHAPE
    (spec,) = [s for s in specs if s.family == hgemm_tuned.FAMILY]
    assert spec.name == f"hgemm[{hgemm_tuned.CPU_CONFIGS[0].name}]"
    assert registry.family_of(spec.name) == hgemm_tuned.FAMILY
    assert registry.family_of(spec.name + "+cuda-graph") == "combo"
    fp32 = gemm_task.read_text().replace("dtype=torch.float16", "dtype=torch.float32")
    other = gemm_task.with_name("fp32_gemm.py")
    other.write_text(fp32)
    assert _analysis(other)[1].hgemm is None
    assert _analysis(FIXTURES / "linear_sum.py")[1].hgemm is None


def test_a_winner_is_tuned_with_the_next_configs_of_the_list(gemm_task: Path):
    _, analysis, specs = _analysis(gemm_task)
    spec = next(s for s in specs if s.family == hgemm_tuned.FAMILY)
    tuned = [v.name for v in registry.variants(spec, analysis, "cpu") if "+" not in v.name]
    assert tuned == [f"hgemm[{c.name}]" for c in hgemm_tuned.CPU_CONFIGS[1:3]]
    last = hgemm_tuned.spec(hgemm_tuned.CPU_CONFIGS[-1])
    assert hgemm_tuned.variants(last, SHAPE, "cpu") == []


def test_the_candidate_with_an_fp16_accumulator_is_caught(gemm_task: Path, make_cpu_options):
    """The generated file passes the static checks; with the accumulator switched to fp16 the
    engine rejects it (the unchanged file passes in the optimize run below)."""
    task, analysis, specs = _analysis(gemm_task)
    spec = next(s for s in specs if s.family == hgemm_tuned.FAMILY)
    source = registry.build(task, spec, analysis)
    assert static_cheats(source, task.source, "fp16") == []
    name = hgemm_tuned.CPU_CONFIGS[0].name
    broken = source.replace(f'from_name("{name}")', f'from_name("{name}-acc16")')
    assert broken != source
    (bad,) = evaluate_many(load_task(gemm_task), [broken], make_cpu_options(precision="fp16", trials=2))
    assert bad.status == Status.INCORRECT, bad.log


def test_optimize_reaches_the_tuned_kernel_through_the_graph(
    gemm_task: Path, tmp_path, cache_dir, monkeypatch
):
    import kforge.agent.policy.embedded as embedded
    from kforge.agent.run import optimize
    from kforge.agent.settings import RunSettings
    from kforge.agent.store import TrajectoryStore

    monkeypatch.setenv("KFORGE_CACHE", str(cache_dir))
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "KFORGE_MODEL"):
        monkeypatch.delenv(var, raising=False)

    def only_hgemm(self, ranker=None, *, use_ranker=True, families=None):
        self.ranker, self.families, self._analyses = None, (hgemm_tuned.FAMILY,), {}

    monkeypatch.setattr(embedded.EmbeddedPolicy, "__init__", only_hgemm)
    settings = RunSettings(
        rounds=2, candidates=1, device="cpu", precision="fp16", timing_trials=3, retrieval=False, out=tmp_path
    )
    summary = optimize(gemm_task, settings)
    assert summary.status == "finished"
    store = TrajectoryStore(summary.run_dir / "trajectories.db")
    (trajectory,) = store.trajectories(summary.run_id)
    strategies = [step.attempt.strategy for step in trajectory.steps]
    assert strategies[0] == f"hgemm[{hgemm_tuned.CPU_CONFIGS[0].name}]"
    first = trajectory.steps[0].result
    assert first.status is Status.OK and first.correct, first.log
    # round 2 tunes the winner with the next config of the list
    assert strategies[1] == f"hgemm[{hgemm_tuned.CPU_CONFIGS[1].name}]", strategies
