"""kforge: makes PyTorch code faster on your GPU, and proves it."""

__version__ = "0.1.0"
