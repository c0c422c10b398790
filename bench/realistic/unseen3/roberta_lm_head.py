"""RoBERTa-base's masked-language-model head (transformers' RobertaLMHead, the BERT-family MLM
head): dense 768 -> 768, exact erf GELU, LayerNorm (eps 1e-5), then the decoder 768 -> 50265
(RoBERTa's BPE vocabulary) plus its bias, giving logits at every position as fill-mask
inference does; batch 8 x 128 tokens (an NLP head: one wide GEMM behind a small one and a
LayerNorm)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

HIDDEN, VOCAB, BATCH, LENGTH = 768, 50265, 8, 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(HIDDEN, HIDDEN)
        self.layer_norm = nn.LayerNorm(HIDDEN, eps=1e-5)
        self.decoder = nn.Linear(HIDDEN, VOCAB)
        self.bias = nn.Parameter(torch.zeros(VOCAB))
        self.decoder.bias = self.bias

    def forward(self, features):
        x = self.dense(features)
        x = F.gelu(x)
        x = self.layer_norm(x)
        # project back to size of vocabulary with bias
        x = self.decoder(x)
        return x


def get_inputs():
    return [torch.randn(BATCH, LENGTH, HIDDEN)]


def get_init_inputs():
    return []
