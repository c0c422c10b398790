"""Checksums of timed outputs: how the judge checks every timed call without copying its output.

A floating output ``c`` is reduced to PROBES sums ``S_k(c) = sum_i w_ki c_i`` in float64, with
weights ``w_ki`` = +1 or -1 drawn from a seed the judge picks per evaluation (a block of CHUNK
weights per probe, reused along the tensor). For an honest output with error ``d = c - e``
against the float64 answer ``e``, ``S_k(c) - S_k(e) = sum_i w_ki d_i`` has mean 0 and, by
Hoeffding's inequality, exceeds ``K * ||d||_2`` with probability below ``2 exp(-K^2 / 2)``
(1e-8 at K = 6). So ``|S_k(c) - S_k(e)| <= K * limit * ||e||_2`` holds on each probe for every
output whose relative L2 error is within the precision class's ``limit``, while a stale output
(the other input set's), an empty one or one computed at a lower precision misses it by orders
of magnitude. A miss is called CLOSE (lowered precision, not stale) only when every probe is
close: one probe of a stale output lands within 1e-2 of the norm about once in a hundred
evaluations, and a stale output returned on every timed call misses by the same amount each
time (a CI run labelled ``stale_after_warmup`` "precision lowered" so, 2026-11-28); all three,
about once in a million. Integer and boolean outputs must match bit for bit (a keyed
fingerprint); other values by equality.

The worker computes the checksum of what it returned, outside the timed region but inside
the judge's wall-clock window: computing the real output there instead of in the timed call
shows up as time the claims do not explain (:mod:`.claims`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .trees import flatten

CHUNK = 1 << 22  # weights per probe, reused along the tensor
STEP = 1 << 21  # elements made float64 at a time (with one probe's weights: 32 MB of temporaries)
K_SIGMA = 6.0
PROBES = 3  # independent sign vectors: a stale output is CLOSE on all of them about 1e-6 of the time


class Checksum:
    def __init__(self, seed: int, device: torch.device) -> None:
        generator = torch.Generator(device=device).manual_seed(seed)
        bits = torch.randint(0, 2, (PROBES, CHUNK), generator=generator, device=device, dtype=torch.int8)
        self.weights = bits * 2 - 1  # int8, 12 MB: made float64 a step at a time (a process's peak
        # memory is bounded, tests/test_memory.py: three float64 probes held would add 64 MB)
        self.seed = seed

    def of(self, out: Any) -> list[Any]:
        """One entry per leaf of ``out``: PROBES floats for a floating tensor (NaNs when any
        element is not finite), ``[shape, dtype, bits]`` for other tensors, the value otherwise."""
        return [self._tensor(x) if isinstance(x, torch.Tensor) else x for x in flatten(out)]

    def _tensor(self, t: torch.Tensor) -> Any:
        flat = t.detach().reshape(-1)
        if flat.is_complex():
            flat = torch.view_as_real(flat).reshape(-1)
        if not flat.is_floating_point():
            return [list(t.shape), str(t.dtype), int((flat.to(torch.int64) * self._int_weights(flat)).sum())]
        weights = self.weights.to(t.device)
        sums = torch.zeros(PROBES, dtype=torch.float64, device=t.device)
        for start in range(0, flat.numel(), STEP):
            part = flat[start : start + STEP].to(torch.float64)
            at = start % CHUNK  # CHUNK is a multiple of STEP: a step never wraps
            for probe in range(PROBES):
                sums[probe] += torch.dot(part, weights[probe, at : at + part.numel()].to(torch.float64))
        values = [float(v) for v in sums.tolist()]
        return values if all(math.isfinite(v) for v in values) else [float("nan")] * PROBES

    def _int_weights(self, flat: torch.Tensor) -> torch.Tensor:
        reps = -(-flat.numel() // CHUNK) or 1
        odd = (self.weights[0].to(torch.int64) * (2 * (self.seed % 1000003) + 1)).to(flat.device)
        return odd.repeat(reps)[: flat.numel()]


def norms(out: Any) -> list[float | None]:
    """The L2 norm of each floating leaf (float64), None for the others."""
    result: list[float | None] = []
    for x in flatten(out):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            flat = x.detach().reshape(-1)
            total = 0.0
            for start in range(0, flat.numel(), CHUNK):
                part = flat[start : start + CHUNK].to(torch.float64)
                total += float(torch.dot(part, part))
            result.append(math.sqrt(total))
        else:
            result.append(None)
    return result


# An output this close to the answer (relative to its norm) that still misses the bound was
# computed on the right inputs at a lower precision; a stale or cached output is off by O(1).
CLOSE = 1e-2


def mismatch(
    claimed: list[Any], expected: list[Any], scale: list[float | None], limit: float
) -> tuple[str, bool]:
    """(why a timed call's checksums do not fit the expected output's, empty when they do;
    whether every miss is CLOSE to the answer). ``scale``: the expected output's L2 norms;
    ``limit``: the relative L2 error allowed."""
    if not isinstance(claimed, list) or len(claimed) != len(expected):
        got = len(claimed) if isinstance(claimed, list) else "?"
        return f"returned {got} outputs, expected {len(expected)}", False
    for i, (c, e, norm) in enumerate(zip(claimed, expected, scale, strict=True)):
        if norm is None:
            if c != e:
                return f"output {i} differs from the reference's", False
            continue
        if not _probes(c):
            return f"output {i} is not finite or not a floating tensor", False
        worst = max(abs(x - y) for x, y in zip(c, e, strict=True))
        if worst > K_SIGMA * limit * norm + 1e-300:
            off = worst / max(norm, 1e-300)  # CLOSE only when every probe is
            return f"output {i} is off by {off:.2e} of its norm (allowed {K_SIGMA * limit:.1e})", off < CLOSE
    return "", False


def _probes(c: Any) -> bool:
    """Whether ``c`` is a floating tensor's checksum: PROBES finite floats."""
    return (
        isinstance(c, list) and len(c) == PROBES and all(isinstance(x, float) and math.isfinite(x) for x in c)
    )
