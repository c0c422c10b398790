"""A model generating in process with transformers (``--model hf:PATH``), no server needed.

PATH is a model folder or a LoRA adapter folder saved by ``kforge train llm`` (its base is
loaded through peft). :class:`HFChatClient` implements the one LLM interface
(``LLMClient``), so the LLM policy drives it exactly as it drives an endpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .llm import Completion, EndpointError, Messages, PromptTooLong

PREFIX = "hf:"


def hf_path(model: str | None) -> Path | None:
    """The folder of an ``hf:PATH`` model name, else None."""
    if not model or not model.startswith(PREFIX):
        return None
    return Path(model[len(PREFIX) :]).expanduser()


def check_hf_model(path: Path) -> None:
    if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
        raise EndpointError(f"--model hf:{path}: no config.json or adapter_config.json there")


class HFChatClient:
    def __init__(self, path: Path, *, device: str = "cpu") -> None:
        check_hf_model(path)
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ModuleNotFoundError:
            raise EndpointError("--model hf: needs transformers: pip install 'kforge[train]'") from None
        self.model = f"{PREFIX}{path}"
        self.tokenizer: Any = AutoTokenizer.from_pretrained(str(path))
        self.lm: Any
        if (path / "adapter_config.json").is_file():
            try:
                from peft import AutoPeftModelForCausalLM
            except ModuleNotFoundError:
                raise EndpointError("a LoRA adapter needs peft: pip install 'kforge[train]'") from None
            self.lm = AutoPeftModelForCausalLM.from_pretrained(str(path))
        else:
            self.lm = AutoModelForCausalLM.from_pretrained(str(path))
        self.lm.to(device).eval()
        self.device = device

    def complete(self, messages: Messages, *, temperature: float, max_tokens: int) -> Completion:
        import torch

        ids = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )["input_ids"].to(self.device)
        limit = getattr(self.lm.config, "max_position_embeddings", None)
        room = max_tokens if limit is None else min(max_tokens, limit - ids.shape[1])
        if room <= 0:
            raise PromptTooLong(
                f"prompt of {ids.shape[1]} tokens does not fit {self.model} ({limit} positions): use a "
                "model with more positions (kforge train tiny-model --max-positions N for a test model)"
            )
        sampling = (
            {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
        )
        with torch.no_grad():
            output = self.lm.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=room,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
                **sampling,
            )
        new = output[0, ids.shape[1] :]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        return Completion(
            text=text, prompt_tokens=int(ids.shape[1]), completion_tokens=len(new), model=self.model
        )
