"""An LLM sampler's logits processing (transformers' RepetitionPenaltyLogitsProcessor, then
TemperatureLogitsWarper, then log-softmax): the logits of the tokens already generated are
gathered, divided or multiplied by the penalty 1.2 by sign, scattered back, divided by the
temperature 0.7, normalised; batch 64 over Llama 2's 32000-token vocabulary with 512 tokens
generated (gathers and scatters)."""

import torch
import torch.nn as nn

BATCH, VOCAB, GENERATED = 64, 32000, 512


class Model(nn.Module):
    def __init__(self, penalty: float = 1.2, temperature: float = 0.7):
        super().__init__()
        self.penalty = penalty
        self.temperature = temperature

    def forward(self, input_ids, scores):
        score = torch.gather(scores, 1, input_ids)
        score = torch.where(score < 0, score * self.penalty, score / self.penalty)
        scores = scores.scatter(1, input_ids, score)
        return torch.log_softmax(scores / self.temperature, dim=-1)


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, GENERATED)), torch.randn(BATCH, VOCAB)]


def get_init_inputs():
    return []
