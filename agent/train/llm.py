"""Train the kernel-writing policy with TRL and LoRA (peft): SFT, DPO or GRPO.

Data is an exported dataset folder (``train.jsonl``): ``sft`` for SFT, ``pairs`` for DPO,
``groups`` for GRPO (its prompts; the reward evaluates each generated answer with the
engine). Checkpoints go to ``out/checkpoints`` every ``save_steps``; ``resume`` continues from
the last one. The adapter and tokenizer are saved in ``out`` (load it with ``--model hf:OUT``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ...tools.evaluate import EvalOptions
from .reward import EvalReward

METHODS = ("sft", "dpo", "grpo")
TRAIN_EXTRA = "kforge train llm needs the train extra: pip install 'kforge[train]' (trl, peft, datasets)"


class TrainSetupError(RuntimeError):
    """Training cannot start (missing extra, no data). The message is one line."""


@dataclasses.dataclass(kw_only=True)
class TrainSettings:
    method: str  # "sft", "dpo" or "grpo"
    base: str  # a model folder or Hugging Face id
    data: Path  # an exported dataset folder (train.jsonl)
    out: Path
    max_steps: int = 100
    learning_rate: float = 1e-4
    batch_size: int = 2
    grad_accum: int = 1
    max_length: int = 4096  # prompt + completion tokens
    max_completion_length: int = 1024  # GRPO's generations
    num_generations: int = 4  # GRPO's group size
    lora_r: int = 16  # 0: full fine-tune, no adapter
    lora_alpha: int = 32
    save_steps: int = 50
    resume: bool = False
    use_cpu: bool = False
    seed: int = 0
    eval_options: EvalOptions | None = None  # GRPO's evaluations (default: cuda)
    eval_parallel: int = 1  # GRPO: tasks evaluated at once


def _imports() -> Any:
    try:
        import datasets
        import peft
        import trl
    except ModuleNotFoundError as err:
        raise TrainSetupError(f"{TRAIN_EXTRA} ({err.name} is missing)") from None
    return datasets, peft, trl


def load_dataset(settings: TrainSettings) -> Any:
    datasets, _, _ = _imports()
    path = settings.data / "train.jsonl"
    if not path.is_file():
        raise TrainSetupError(f"{path}: no such file; make it with kforge export")
    data = datasets.load_dataset("json", data_files=str(path), split="train")
    if len(data) == 0:
        raise TrainSetupError(f"{path} is empty: export from more runs, or lower --min-speedup")
    keep = {"sft": ("prompt", "completion"), "dpo": ("prompt", "chosen", "rejected")}
    keep_grpo = ("prompt", "task_name", "task_source")
    columns = keep.get(settings.method, keep_grpo)
    missing = [c for c in columns if c not in data.column_names]
    if missing:
        raise TrainSetupError(
            f"{path} has no {', '.join(missing)}: export the dataset {settings.method} needs"
        )
    return data.select_columns(list(columns))


def _common_args(settings: TrainSettings) -> dict[str, Any]:
    return dict(
        output_dir=str(settings.out / "checkpoints"),
        max_steps=settings.max_steps,
        learning_rate=settings.learning_rate,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum,
        save_steps=settings.save_steps,
        logging_steps=1,
        report_to=[],
        use_cpu=settings.use_cpu,
        seed=settings.seed,
        save_total_limit=2,
    )


def _trainer(settings: TrainSettings, model: Any, tokenizer: Any, data: Any, lora: Any) -> Any:
    _, _, trl = _imports()
    common = _common_args(settings)
    if settings.method == "sft":
        args = trl.SFTConfig(**common, max_length=settings.max_length)
        return trl.SFTTrainer(
            model=model, args=args, train_dataset=data, processing_class=tokenizer, peft_config=lora
        )
    if settings.method == "dpo":
        args = trl.DPOConfig(**common, max_length=settings.max_length)
        return trl.DPOTrainer(
            model=model, args=args, train_dataset=data, processing_class=tokenizer, peft_config=lora
        )
    reward = EvalReward(settings.eval_options or EvalOptions(), parallel=settings.eval_parallel)
    args = trl.GRPOConfig(
        **common,
        num_generations=settings.num_generations,
        max_completion_length=settings.max_completion_length,
    )
    return trl.GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        peft_config=lora,
    )


def last_checkpoint(settings: TrainSettings) -> Path | None:
    folders = sorted(
        (settings.out / "checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1])
    )
    return folders[-1] if folders else None


def train_llm(settings: TrainSettings) -> Any:
    """Train, save the adapter and tokenizer in ``settings.out``; returns the TRL trainer."""
    if settings.method not in METHODS:
        raise TrainSetupError(f"unknown method {settings.method!r}: one of {', '.join(METHODS)}")
    _, peft, _ = _imports()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data = load_dataset(settings)
    tokenizer = AutoTokenizer.from_pretrained(settings.base)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(settings.base)
    lora = (
        peft.LoraConfig(
            r=settings.lora_r,
            lora_alpha=settings.lora_alpha,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        )
        if settings.lora_r > 0
        else None  # full fine-tune
    )
    trainer = _trainer(settings, model, tokenizer, data, lora)
    checkpoint = last_checkpoint(settings) if settings.resume else None
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    trainer.save_model(str(settings.out))
    tokenizer.save_pretrained(str(settings.out))
    meta = {"method": settings.method, "base": settings.base, "data": str(settings.data)}
    meta["steps"] = trainer.state.global_step
    (settings.out / "kforge_train.json").write_text(json.dumps(meta, indent=2) + "\n")
    return trainer
