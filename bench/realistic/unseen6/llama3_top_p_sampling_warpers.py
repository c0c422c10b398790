"""The sampling step of Llama 3 8B Instruct's generation as transformers writes it
(generation/logits_process.py and GenerationMixin._sample): the next-token logits over Llama 3's
128,256-token vocabulary (already copied to float32 by generate) go through the logits warpers
that the model's generation_config (do_sample, temperature 0.6, top_p 0.9) and GenerationConfig's
default top_k 50 build, in _get_logits_processor's order: TemperatureLogitsWarper (scores /
temperature), TopKLogitsWarper (scores < torch.topk(scores, k)[0][..., -1, None], masked_fill
with -inf), TopPLogitsWarper (ascending torch.sort, softmax + cumsum, the tokens whose cumulative
probability is <= 1 - top_p removed, the last min_tokens_to_keep kept by slice assignment, the
mask scattered back to vocabulary order, masked_fill with -inf); then the softmax that feeds
torch.multinomial (the draw itself is left out: no random numbers in the forward). An LLM
serving block: one decoding step for batch 64 concurrent sequences."""

import torch
import torch.nn as nn

VOCAB_SIZE, BATCH = 128256, 64
TEMPERATURE, TOP_K, TOP_P = 0.6, 50, 0.9


class TemperatureLogitsWarper:
    def __init__(self, temperature: float):
        if not isinstance(temperature, float) or not (temperature > 0):
            except_msg = (
                f"`temperature` (={temperature}) has to be a strictly positive float, otherwise your next token "
                "scores will be invalid."
            )
            if isinstance(temperature, float) and temperature == 0.0:
                except_msg += " If you're looking for greedy decoding strategies, set `do_sample=False`."
            raise ValueError(except_msg)

        self.temperature = temperature

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        scores_processed = scores / self.temperature
        return scores_processed


class TopKLogitsWarper:
    def __init__(self, top_k: int, filter_value: float = -float("Inf"), min_tokens_to_keep: int = 1):
        if not isinstance(top_k, int) or top_k <= 0:
            raise ValueError(f"`top_k` has to be a strictly positive integer, but is {top_k}")

        self.top_k = max(top_k, min_tokens_to_keep)
        self.filter_value = filter_value

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        top_k = min(self.top_k, scores.size(-1))  # Safety check
        # Remove all tokens with a probability less than the last token of the top-k
        indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
        scores_processed = scores.masked_fill(indices_to_remove, self.filter_value)
        return scores_processed


class TopPLogitsWarper:
    def __init__(self, top_p: float, filter_value: float = -float("Inf"), min_tokens_to_keep: int = 1):
        top_p = float(top_p)
        if top_p < 0 or top_p > 1.0:
            raise ValueError(f"`top_p` has to be a float > 0 and < 1, but is {top_p}")
        if not isinstance(min_tokens_to_keep, int) or (min_tokens_to_keep < 1):
            raise ValueError(
                f"`min_tokens_to_keep` has to be a positive integer, but is {min_tokens_to_keep}"
            )

        self.top_p = top_p
        self.filter_value = filter_value
        self.min_tokens_to_keep = min_tokens_to_keep

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)

        # Remove tokens with cumulative top_p above the threshold (token with 0 are kept)
        sorted_indices_to_remove = cumulative_probs <= (1 - self.top_p)
        # Keep at least min_tokens_to_keep
        sorted_indices_to_remove[..., -self.min_tokens_to_keep :] = 0

        # scatter sorted tensors to original indexing
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        scores_processed = scores.masked_fill(indices_to_remove, self.filter_value)
        return scores_processed


class LogitsProcessorList(list):
    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        # GenerationMixin._get_logits_processor: temperature, then top_k, then top_p
        self.logits_processor = LogitsProcessorList(
            [
                TemperatureLogitsWarper(TEMPERATURE),
                TopKLogitsWarper(top_k=TOP_K, min_tokens_to_keep=1),
                TopPLogitsWarper(top_p=TOP_P, min_tokens_to_keep=1),
            ]
        )

    def forward(self, next_token_logits):
        # GenerationMixin._sample: pre-process distribution, then the probabilities multinomial draws from
        next_token_scores = self.logits_processor(None, next_token_logits)
        probs = nn.functional.softmax(next_token_scores, dim=-1)
        return probs


def get_inputs():
    # a trained LM head's logits: a spread of a few units around a per-row offset
    return [torch.randn(BATCH, VOCAB_SIZE) * 2.5 + torch.randn(BATCH, 1)]


def get_init_inputs():
    return []
