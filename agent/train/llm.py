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


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    import os
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection(
            (url.hostname or "huggingface.co", url.port or 443), timeout=timeout_s
        ).close()
    except OSError:
        return False
    return True


def _local_base(base: str) -> str:
    """``base`` as a folder transformers can load: the folder itself, the local copy of a hub
    id, or a download. Fails at once, in one line, where the hub cannot be reached (instead of
    retrying it for a minute)."""
    if Path(base).is_dir():
        return base
    from huggingface_hub import snapshot_download

    try:
        return str(snapshot_download(base, local_files_only=True))
    except Exception:  # noqa: BLE001 - not in the local cache (or not a hub id)
        pass
    if Path(base).expanduser().is_absolute() or base.startswith((".", "~")):
        raise TrainSetupError(f"{base}: no such model folder")
    if not _hub_reachable():
        raise TrainSetupError(
            f"cannot reach the Hugging Face hub for {base!r} and it is not in the local cache: pass a "
            "model folder (kforge train tiny-model --data DATA --out MODEL builds a small one offline)"
        )
    try:
        return str(snapshot_download(base))
    except Exception as err:  # noqa: BLE001 - transformers/hub errors are many and long
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise TrainSetupError(f"cannot download {base!r}: {first}") from None


def _text(tokenizer: Any, value: Any) -> list[int]:
    if isinstance(value, list):  # chat messages
        ids = tokenizer.apply_chat_template(value, tokenize=True, return_dict=True)["input_ids"]
        return list(ids)
    return list(tokenizer(str(value))["input_ids"])


def check_lengths(settings: TrainSettings, data: Any, tokenizer: Any, positions: int | None) -> None:
    """Fail in one line, saying what to change, when no example fits: every prompt plus answer
    longer than ``--max-length`` (SFT, DPO), or every prompt longer than the model's positions."""
    if settings.method == "grpo":
        longest_ok, limit, flag = positions, positions, "a model with more positions"
        lengths = [len(_text(tokenizer, row["prompt"])) for row in data]
    else:
        answer = "completion" if settings.method == "sft" else "chosen"
        lengths = [len(_text(tokenizer, row["prompt"])) + len(_text(tokenizer, row[answer])) for row in data]
        longest_ok, limit, flag = settings.max_length, settings.max_length, f"--max-length {min(lengths)}"
        if positions is not None and min(lengths) > positions:
            longest_ok, flag = positions, "a base model with more positions (tiny-model --max-positions)"
    if longest_ok is not None and lengths and min(lengths) > longest_ok:
        raise TrainSetupError(
            f"every example is longer than {longest_ok} tokens (the shortest has {min(lengths)}; limit "
            f"{limit}): use {flag}"
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
    base = _local_base(settings.base)
    tokenizer = AutoTokenizer.from_pretrained(base)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(base)
    check_lengths(settings, data, tokenizer, getattr(model.config, "max_position_embeddings", None))
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
