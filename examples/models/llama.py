"""A Llama decoder (Llama 3.2 1B's dimensions) from a transformers config: random weights,
nothing downloaded.

    kforge model examples/models/llama.py:full     # 16 layers, batch 4 x 512 tokens (a GPU)
    kforge model examples/models/llama.py:tiny     # two small layers (a CPU)
"""

import torch
from transformers import LlamaConfig, LlamaModel


def full():
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=4096, rope_theta=500000.0, use_cache=False,
    )  # fmt: skip
    return LlamaModel(config), [torch.randint(0, 128256, (4, 512))]


def tiny():
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128, max_position_embeddings=64, use_cache=False,
    )  # fmt: skip
    return LlamaModel(config), [torch.randint(0, 128, (2, 16))]
