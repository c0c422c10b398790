"""GPT-2 (124M) from its transformers config: random weights, nothing downloaded.

kforge model examples/models/gpt2.py:full      # batch 8 x 512 tokens (a GPU)
kforge model examples/models/gpt2.py:tiny      # two small layers (a CPU)
"""

import torch
from transformers import GPT2Config, GPT2Model


def full():
    torch.manual_seed(0)
    return GPT2Model(GPT2Config(use_cache=False)), [torch.randint(0, 50257, (8, 512))]


def tiny():
    torch.manual_seed(0)
    config = GPT2Config(
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=64,
        vocab_size=128,
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
    )
    return GPT2Model(config), [torch.randint(0, 128, (2, 16))]
