"""A small random-initialised chat model built offline: a byte-level BPE tokenizer trained on
the given texts, with a chat template, and a Llama config of the given size. For tests and
benchmarks where no weights can be downloaded; it learns only what it is trained on."""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL_TOKENS = ["<|end|>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]


def build_random_model(
    texts: list[str],
    out: Path,
    *,
    vocab_size: int = 1500,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 2,
    max_positions: int = 4096,
    seed: int = 0,
) -> Path:
    """Save a tokenizer and a random Llama model in ``out``; returns ``out``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|end|>", pad_token="<pad>", chat_template=CHAT_TEMPLATE
    )
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def dataset_texts(data: Path) -> list[str]:
    """Every message and answer of an exported dataset folder (its ``train.jsonl``)."""
    import json

    texts: list[str] = []

    def add(value: object) -> None:
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, list):
            for item in value:
                add(item.get("content", "") if isinstance(item, dict) else item)

    for line in (data / "train.jsonl").read_text().splitlines():
        row = json.loads(line) if line.strip() else {}
        for key in ("prompt", "completion", "chosen", "rejected", "task_source"):
            add(row.get(key))
    return texts
