"""SFT, DPO and GRPO a few steps each on a tiny random model built here (a 2-layer Llama with
a BPE tokenizer trained on the fixture texts: no downloads), LoRA through peft; the GRPO
reward from the CPU evaluator; resume after an interrupted run; the adapter used by
``kforge optimize --model hf:DIR``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
from kforge.agent.store import TrajectoryStore  # noqa: E402
from kforge.agent.train.export import export  # noqa: E402
from kforge.agent.train.llm import TrainSettings, train_llm  # noqa: E402
from kforge.agent.train.reward import FLOOR, REJECTED, VERIFIED_MIN, EvalReward  # noqa: E402
from kforge.agent.train.samples import load_samples  # noqa: E402
from kforge.agent.train.tiny import build_random_model  # noqa: E402

pytestmark = pytest.mark.slow  # end to end: left out of the quick loop (-m 'not slow and not gpu')

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def datasets_dir(tmp_path_factory, train_runs):
    root = tmp_path_factory.mktemp("data")
    samples = load_samples([train_runs])
    for kind, options in (("sft", {"min_speedup": 0.0}), ("pairs", {}), ("groups", {})):
        export(kind, samples, root / kind, test_fraction=0.0, **options)
    return root


@pytest.fixture(scope="module")
def tiny_model(datasets_dir, tmp_path_factory, train_runs):
    samples = load_samples([train_runs])
    texts = [m["content"] for s in samples for m in s.prompt] + [s.answer for s in samples]
    return build_random_model(texts, tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def eval_options(make_session_cpu_options):
    return make_session_cpu_options(trials=2)


def settings(method, base, data, out, **changes) -> TrainSettings:
    base_settings = dict(
        method=method, base=str(base), data=data, out=out, max_steps=2, batch_size=2, max_length=1024,
        max_completion_length=12, num_generations=2, lora_r=4, lora_alpha=8, save_steps=1, use_cpu=True,
    )  # fmt: skip
    return TrainSettings(**{**base_settings, **changes})


def test_reward_measures_correct_incorrect_and_cheating_candidates(eval_options, train_runs):
    task = (FIXTURES / "tasks" / "scale_relu.py").read_text()
    good = (FIXTURES / "train" / "runs" / "scale_relu" / "task" / "scale_relu.py").read_text()
    assert good == task
    correct = [
        s for s in load_samples([train_runs]) if s.task_name == "scale_relu" and s.result.status.value == "ok"
    ][0]
    wrong = [
        s
        for s in load_samples([train_runs])
        if s.task_name == "scale_relu" and s.result.status.value == "incorrect"
    ]
    cheat = "## Performance analysis\n-\n## Plan\n-\n## Code\n```python\n"
    cheat += (FIXTURES / "cheats" / "calls_reference.py").read_text() + "```\n"
    answers = [
        correct.answer,
        wrong[0].answer if wrong else correct.answer.replace("clamp_min(0.0)", "abs()"),
    ]
    answers += [cheat, "not an answer"]
    reward = EvalReward(eval_options, parallel=2)
    rewards = reward(
        [""] * 4, [[{"role": "assistant", "content": a}] for a in answers], ["scale_relu"] * 4, [task] * 4
    )
    statuses = [r.status.value if r else None for r in reward.results]
    assert statuses == ["ok", "incorrect", "rejected", None]
    assert (
        rewards[0] >= VERIFIED_MIN and rewards[1] == FLOOR and rewards[2] == REJECTED and rewards[3] == FLOOR
    )
    assert reward.evaluations == 3


@pytest.fixture(scope="module")
def sft_run(tiny_model, datasets_dir, tmp_path_factory):
    """Two SFT steps, a checkpoint after each; the adapter is saved in the returned folder."""
    out = tmp_path_factory.mktemp("sft")
    trainer = train_llm(settings("sft", tiny_model, datasets_dir / "sft", out))
    assert trainer.state.global_step == 2
    return out


def test_sft_checkpoints_and_resumes_after_an_interrupted_run(sft_run, tiny_model, datasets_dir, tmp_path):
    out = tmp_path / "sft"
    shutil.copytree(sft_run, out)  # a run stopped after step 2 (its last checkpoint)
    assert (out / "checkpoints" / "checkpoint-2").is_dir()
    resumed = train_llm(settings("sft", tiny_model, datasets_dir / "sft", out, max_steps=3, resume=True))
    assert resumed.state.global_step == 3
    steps = [entry["step"] for entry in resumed.state.log_history if "loss" in entry]
    assert steps == [1, 2, 3]  # the resumed run kept the first two steps' history and added one
    assert (out / "adapter_config.json").is_file()
    assert json.loads((out / "kforge_train.json").read_text())["steps"] == 3


def test_dpo_trains_on_the_pairs(tiny_model, datasets_dir, tmp_path):
    trainer = train_llm(settings("dpo", tiny_model, datasets_dir / "pairs", tmp_path / "dpo"))
    assert trainer.state.global_step == 2
    assert any("loss" in entry for entry in trainer.state.log_history)


def test_grpo_rewards_come_from_the_evaluator(tiny_model, datasets_dir, tmp_path, eval_options):
    trainer = train_llm(
        settings("grpo", tiny_model, datasets_dir / "groups", tmp_path / "grpo", eval_options=eval_options)
    )
    assert trainer.state.global_step == 2
    (reward,) = trainer.reward_funcs
    assert isinstance(reward, EvalReward) and len(reward.results) == 2  # one batch of two answers scored
    logged = [e for e in trainer.state.log_history if "reward" in e]
    assert logged and all(e["reward"] >= REJECTED for e in logged)


def test_the_adapter_runs_in_optimize_through_the_hf_policy(sft_run, tmp_path, cache_dir):
    adapter = sft_run
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "KFORGE_MODEL")
    }
    env["KFORGE_CACHE"] = str(cache_dir)
    command = [
        sys.executable, "-c", "from kforge.agent.cli import main; main()", "optimize",
        str(FIXTURES / "agent" / "tasks" / "add_relu.py"), "--device", "cpu", "--model", f"hf:{adapter}",
        "--rounds", "1", "--candidates", "1", "--max-tokens", "24", "--no-retrieval", "--timing-trials", "3",
        "--out", str(tmp_path / "runs"), "--quiet",
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]  # and kforge's .gitignore
    store = TrajectoryStore(run_dir / "trajectories.db")
    run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
    assert store.run_info(run_id)["status"] == "finished"
    calls = store.llm_calls(run_id)
    assert [c["role"] for c in calls] == ["planner", "coder", "critic"]
    assert all(c["model"] == f"hf:{adapter}" and c["completion_tokens"] for c in calls)
    (trajectory,) = store.trajectories(run_id)
    assert [s.result.status.value for s in trajectory.steps if s.result] == ["format_error"]


def test_train_command_says_what_to_do_without_data(tmp_path):
    from kforge.agent.cli import app
    from typer.testing import CliRunner

    args = [
        "train",
        "llm",
        "--method",
        "dpo",
        "--base",
        "x",
        "--data",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "make it with kforge export" in result.output


def test_a_hub_id_that_cannot_be_reached_fails_at_once_in_one_line(datasets_dir, tmp_path, monkeypatch):
    import time

    from kforge.agent.train.llm import TrainSetupError

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    start = time.monotonic()
    with pytest.raises(TrainSetupError, match="cannot reach the Hugging Face hub .* tiny-model") as err:
        train_llm(settings("sft", "someone/some-model", datasets_dir / "sft", tmp_path / "out"))
    assert time.monotonic() - start < 15 and "\n" not in str(err.value)


def test_examples_longer_than_max_length_say_what_to_change(tiny_model, datasets_dir, tmp_path):
    from kforge.agent.train.llm import TrainSetupError

    with pytest.raises(
        TrainSetupError, match=r"every example is longer than 16 tokens .* use --max-length \d+"
    ):
        train_llm(settings("sft", tiny_model, datasets_dir / "sft", tmp_path / "out", max_length=16))


def test_tiny_model_command_builds_a_base_offline(datasets_dir, tmp_path):
    from kforge.agent.cli import app
    from transformers import AutoConfig
    from typer.testing import CliRunner

    out = tmp_path / "model"
    args = [
        "train",
        "tiny-model",
        "--data",
        str(datasets_dir / "sft"),
        "--out",
        str(out),
        "--max-positions",
        "512",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert AutoConfig.from_pretrained(out).max_position_embeddings == 512
    missing = CliRunner().invoke(app, ["train", "tiny-model", "--data", str(tmp_path), "--out", str(out)])
    assert missing.exit_code == 2 and "make it with kforge export" in missing.output
