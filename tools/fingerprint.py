"""Keyed fingerprints of tensors: what the verifier keeps instead of copies of multi-GB inputs
and outputs when all it needs to know is whether two of them hold the same bits (an input
changed in place, an output repeated from the previous call, an output still changing after
the caller's stream finished).

A tensor's bits, read as integers, are summed with random odd weights drawn from an
unpredictable seed (the candidate cannot know them), chunk by chunk, modulo 2**64: two
different tensors collide with a probability of about 2**-64, and the temporaries are
those of one chunk.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from .compare import same
from .trees import clone, flatten

CHUNK = 1 << 20  # elements per slice (int64 temporaries of 8 MB)
COPY_BYTES = 1 << 30  # inputs above this are fingerprinted before a call, not copied
_AS_INTEGERS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class Fingerprinter:
    """Fingerprints under one secret key (weights on one device)."""

    def __init__(self, device: torch.device) -> None:
        generator = torch.Generator(device=device).manual_seed(random.SystemRandom().randrange(2**62))
        weights = torch.randint(-(2**62), 2**62, (CHUNK,), generator=generator, device=device)
        self.weights = weights * 2 + 1  # odd: multiplying by a weight loses no bit

    def of(self, obj: Any) -> list[Any]:
        """One entry per leaf of ``obj``: (shape, dtype, hash) for a tensor, the value otherwise."""
        return [self._tensor(x) if isinstance(x, torch.Tensor) else x for x in flatten(obj)]

    def _tensor(self, t: torch.Tensor) -> tuple[tuple[int, ...], torch.dtype, int]:
        flat = t.detach().reshape(-1)
        if flat.dtype.is_complex:
            flat = torch.view_as_real(flat).reshape(-1)
        bits = flat.view(_AS_INTEGERS[flat.element_size()])
        total = torch.zeros((), dtype=torch.int64, device=t.device)
        weights = self.weights.to(t.device)
        for i, start in enumerate(range(0, bits.numel(), CHUNK)):
            part = bits[start : start + CHUNK].to(torch.int64)
            total += (part * weights[: part.numel()]).sum() * (2 * i + 1)
        return tuple(t.shape), t.dtype, int(total)


class Snapshot:
    """What a call's inputs held before it, to tell afterwards whether the call changed them in
    place: a copy of inputs up to COPY_BYTES, keyed fingerprints of larger ones. A copy of
    KernelBench's 7 GB InstanceNorm input took GPU memory the models needed (both processes ran
    out), or, kept in host memory, seconds a call; a fingerprint is one read of it."""

    def __init__(self, obj: Any, fingerprints: Fingerprinter) -> None:
        size = sum(t.numel() * t.element_size() for t in flatten(obj) if isinstance(t, torch.Tensor))
        self.fingerprints = fingerprints
        self.copy = clone(obj) if size <= COPY_BYTES else None
        self.prints = fingerprints.of(obj) if self.copy is None else None

    def matches(self, obj: Any) -> bool:
        """``obj`` holds what it held (NaN equal to NaN; bit for bit where fingerprinted)."""
        return same(obj, self.copy) if self.copy is not None else self.fingerprints.of(obj) == self.prints
