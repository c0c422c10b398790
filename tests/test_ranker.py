"""The strategy cost model: fit on trajectories (synthetic, written through the real store),
it orders strategies better than the fixed default order on held-out tasks."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

from kforge.agent.policy.features import TaskFeatures
from kforge.agent.policy.ranker import (
    Example,
    RankerModel,
    fit,
    fit_toward,
    fit_with_prior,
    fixed_order,
    load_model,
    ndcg,
)
from kforge.agent.policy.ranker_data import features_line, load_examples, parse_features, split_features
from kforge.agent.policy.ranker_synth import synth_tasks, write_store


def _gains(task) -> dict[str, float]:
    return {f: max(0.0, v) if v is not None else 0.0 for f, v in task.log2_speedups.items()}


def _first_win(order: list[str], gains: dict[str, float]) -> int:
    best = max(gains.values())
    return next(i for i, f in enumerate(order) if gains[f] >= best - 1e-9)


def test_fit_model_orders_held_out_tasks_better_than_the_fixed_order(tmp_path):
    train, held_out = synth_tasks(240, seed=11), synth_tasks(80, seed=12)
    write_store(tmp_path / "trajectories.db", train)
    examples = load_examples([tmp_path])
    assert len({e.task for e in examples}) == len(train)
    model = fit(examples)
    model_ndcg, fixed_ndcg, model_first, fixed_first = [], [], [], []
    for task in held_out:
        families, gains = list(task.log2_speedups), _gains(task)
        ranked = model.order(families, task.features.vector())
        model_ndcg.append(ndcg(ranked, gains))
        fixed_ndcg.append(ndcg(fixed_order(families), gains))
        model_first.append(_first_win(ranked, gains))
        fixed_first.append(_first_win(fixed_order(families), gains))
    assert statistics.mean(model_ndcg) > statistics.mean(fixed_ndcg) + 0.1
    assert statistics.mean(model_first) < statistics.mean(fixed_first)


def test_shipped_model_loads_and_says_what_it_was_fit_on():
    model = load_model()
    assert model is not None and model.metadata["synthetic"] is True
    assert any("KernelBench" in s for s in model.metadata["sources"]), "measured trajectories are a source"
    assert {"compile-default", "cuda-graph", "fx-rewrite"} <= set(model.weights)


def test_nchw_prior_only_for_2d_3d_convolutions_and_the_shipped_model_tries_it_on_one():
    for task in synth_tasks(200, seed=5):
        assert ("compile-nchw" in task.log2_speedups) == (task.features.conv_dims in (2, 3)), task.name
    # KernelBench L2 19 (ConvTranspose2d, GELU, GroupNorm) as the planner saw it on the H200: torch.compile
    # trails eager there; compiled on NCHW it ran at 1.17-1.20x of eager
    # (docs/log/2026-11-23-compile-nchw.md)
    features = TaskFeatures(
        gpu="H200", bound="compute", flops=6.18e11, min_bytes=4.33e9, launches=3, conv_dims=2,
        eager_ms=14.56, compile_ms=16.53, floor_ms=9.23,
        ops={"convolution": 1, "gelu": 1, "native_group_norm": 1},
    )  # fmt: skip
    families = ["compile-default", "compile-max-autotune-no-cudagraphs", "cuda-graph", "compile-nchw"]
    assert load_model().order(families, features.vector())[0] == "compile-nchw"


def test_train_ranker_command(tmp_path):
    write_store(tmp_path / "runs" / "trajectories.db", synth_tasks(30, seed=3))
    out = tmp_path / "model.json"
    cmd = [sys.executable, "-c", "from kforge.agent.cli import main; main()", "train", "ranker"]
    done = subprocess.run([*cmd, str(tmp_path / "runs"), "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert data["counts"]["compile-default"] == 30 and data["metadata"]["synthetic"] is False
    assert load_model(out).weights == data["weights"]
    weighted = subprocess.run(
        [*cmd, str(tmp_path / "runs"), "--out", str(out), "--real-weight", "3"],
        capture_output=True,
        text=True,
    )
    assert weighted.returncode == 0, weighted.stderr
    data = json.loads(out.read_text())
    assert data["counts"]["compile-default"] == 30, "measured 30 times: fit on the measurements alone"
    prior_fitted = subprocess.run(
        [*cmd, str(tmp_path / "runs"), "--out", str(out), "--real-weight", "3", "--min-measured", "31"],
        capture_output=True,
        text=True,
    )
    assert prior_fitted.returncode == 0, prior_fitted.stderr
    data = json.loads(out.read_text())
    assert data["counts"]["compile-default"] == 90 and data["metadata"]["real_weight"] == 3
    bad = subprocess.run(cmd, capture_output=True, text=True)
    assert bad.returncode == 2 and "give run folders" in bad.stderr
    missing = subprocess.run([*cmd, str(tmp_path / "nope")], capture_output=True, text=True)
    assert missing.returncode == 2 and "no such run folder" in missing.stderr


def test_an_update_moves_the_base_toward_new_runs_by_its_strength_and_keeps_the_rest():
    """No data of the base is needed: a family measured in the new runs moves from the base's
    prediction toward what they measured (all the way at strength 0, not at all when very
    strong); a family not measured again keeps its weights; a new family needs MIN_EXAMPLES."""
    x = [1.0] + [0.0] * 12
    base = RankerModel(weights={"compile-default": [1.0] + [0.0] * 12, "cuda-graph": [0.5] + [0.0] * 12},
                       counts={"compile-default": 10, "cuda-graph": 10})  # fmt: skip
    runs = [Example(f"t{i}", "compile-default", x, -1.0) for i in range(4)]
    runs += [Example("t0", "triton-template", x, 2.0), Example("t1", "triton-template", x, 2.0)]
    loose, firm = fit_toward(base, runs, 0.0), fit_toward(base, runs, 1e6)
    assert (
        abs(loose.score("compile-default", x) + 1.0) < 0.01
        and abs(firm.score("compile-default", x) - 1.0) < 0.01
    )
    middle = fit_toward(base, runs, 4.0).score("compile-default", x)  # (4 * -1 + 4 * 1) / (4 + 4)
    assert abs(middle) < 0.01
    assert loose.weights["cuda-graph"] == base.weights["cuda-graph"] and loose.counts["compile-default"] == 14
    assert "triton-template" not in loose.weights  # two examples of a family the base lacks
    runs.append(Example("t2", "triton-template", x, 2.0))
    assert (
        fit_toward(base, runs, 0.1).order(["cuda-graph", "triton-template", "compile-default"], x)[0]
        == "triton-template"
    )


def test_train_ranker_updates_the_shipped_model_with_base(tmp_path):
    write_store(tmp_path / "runs" / "trajectories.db", synth_tasks(10, seed=5))
    out = tmp_path / "model.json"
    cmd = [
        sys.executable,
        "-c",
        "from kforge.agent.cli import main; main()",
        "train",
        "ranker",
        str(tmp_path / "runs"),
    ]
    done = subprocess.run([*cmd, "--out", str(out), "--base", "shipped"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    shipped, updated = load_model(), load_model(out)
    assert shipped is not None and updated is not None
    assert updated.metadata["base"] == "shipped" and updated.metadata["update_examples"] > 0
    assert updated.weights["compile-default"] != shipped.weights["compile-default"]
    own = tmp_path / "own.json"  # a base with a family the runs never measured: kept as it is
    shipped.weights["made-up-family"] = [0.25] * len(shipped.weights["compile-default"])
    shipped.save(own)
    done = subprocess.run([*cmd, "--out", str(out), "--base", str(own)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert load_model(out).weights["made-up-family"] == [0.25] * len(shipped.weights["compile-default"])
    bad = subprocess.run([*cmd, "--base", str(tmp_path / "nope.json")], capture_output=True, text=True)
    assert bad.returncode == 2 and "--base" in bad.stderr and "Traceback" not in bad.stderr


def test_the_prior_only_fills_in_families_measured_too_rarely():
    """Measured: compile-default is slow on these tasks (6 examples), fx-rewrite was measured
    once. The synthetic prior says both are fast. compile-default follows the measurements,
    fx-rewrite the prior (with its one measurement beside it)."""
    x = [1.0] + [0.0] * 12
    measured = [Example(f"t{i}", "compile-default", x, -0.5) for i in range(6)]
    measured.append(Example("t0", "fx-rewrite", x, 3.0))
    prior = [Example(f"s{i}", f, x, 2.0) for i in range(20) for f in ("compile-default", "fx-rewrite")]
    model = fit_with_prior(measured, prior)
    assert abs(model.score("compile-default", x) + 0.5) < 0.01
    assert 1.9 < model.score("fx-rewrite", x) < 2.2
    assert model.counts == {"compile-default": 6, "fx-rewrite": 21}
    assert model.metadata["measured_families"] == ["compile-default"]


def test_the_plan_people_see_has_no_features_json_and_the_stored_one_keeps_it() -> None:
    features = TaskFeatures.from_json({"flops": 2.0, "launches": 3})
    plan = f"Embedded strategy plan.\n1. compile-default: fuse\n{features_line(features)}"
    shown, machine = split_features(plan)
    assert shown == "Embedded strategy plan.\n1. compile-default: fuse"
    assert parse_features(f"{shown}\nKeep it torch-only.\n{machine}") == features
    assert split_features("an LLM's plan") == ("an LLM's plan", "")
