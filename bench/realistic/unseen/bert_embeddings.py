"""BERT-base's embeddings (transformers' BertEmbeddings): word (30522 x 768), position (512) and
token-type (2) lookups summed, then LayerNorm (eps 1e-12); dropout off in eval; batch 32 x 512
tokens (an LLM-family encoder's first block)."""

import torch
import torch.nn as nn

VOCAB, WIDTH, POSITIONS, BATCH, LENGTH = 30522, 768, 512, 32, 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Embedding(POSITIONS, WIDTH)
        self.token_type = nn.Embedding(2, WIDTH)
        self.norm = nn.LayerNorm(WIDTH, eps=1e-12)
        self.register_buffer("position_ids", torch.arange(POSITIONS)[None])

    def forward(self, input_ids, token_type_ids):
        positions = self.position_ids[:, : input_ids.shape[1]]
        x = self.word(input_ids) + self.token_type(token_type_ids) + self.position(positions)
        return self.norm(x)


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, LENGTH)), torch.randint(0, 2, (BATCH, LENGTH))]


def get_init_inputs():
    return []
