"""A BERT-base encoder from its transformers config: random weights, nothing downloaded.

kforge model examples/models/bert.py:full      # batch 16 x 384 tokens (a GPU)
kforge model examples/models/bert.py:tiny      # two small layers (a CPU)
"""

import torch
from transformers import BertConfig, BertModel


def full():
    torch.manual_seed(0)
    return BertModel(BertConfig(), add_pooling_layer=False), [torch.randint(0, 30522, (16, 384))]


def tiny():
    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, vocab_size=128
    )
    return BertModel(config, add_pooling_layer=False), [torch.randint(0, 128, (2, 16))]
