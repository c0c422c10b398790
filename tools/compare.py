"""Output comparison: the candidate's outputs against the reference's under a precision
class's tolerance, error figures against a float64 reference, and bitwise sameness. Tensors
are compared slice by slice (CHUNK elements), so multi-GB outputs fit on the GPU beside
their float64 temporaries."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from .precision import PrecisionClass
from .trees import flatten

CHUNK = 1 << 20  # elements per slice when comparing outputs (float64 temporaries of 8 MB)


def compare(cand: Any, ref: Any, precision: PrecisionClass) -> tuple[bool, str, float, float]:
    """(ok, message, max abs error, max relative error) of the candidate's output."""
    cands, refs = flatten(cand), flatten(ref)
    if len(cands) != len(refs):
        return False, f"returned {len(cands)} outputs, expected {len(refs)}", 0.0, 0.0
    max_abs = max_rel = 0.0
    for i, (c, r) in enumerate(zip(cands, refs, strict=True)):
        if not isinstance(r, torch.Tensor):
            if c != r:
                return False, f"output {i}: {c!r} != {r!r}", 0.0, 0.0
            continue
        if not isinstance(c, torch.Tensor):
            return False, f"output {i} is {type(c).__name__}, expected a tensor", 0.0, 0.0
        if c.shape != r.shape:
            return False, f"output {i} shape {tuple(c.shape)}, expected {tuple(r.shape)}", 0.0, 0.0
        if c.dtype != r.dtype:
            return False, f"output {i} dtype {c.dtype}, expected {r.dtype}", 0.0, 0.0
        if c.device != r.device:
            return False, f"output {i} on {c.device}, expected {r.device}", 0.0, 0.0
        if not r.is_floating_point():
            if not torch.equal(c, r):
                return False, f"output {i}: integer values differ", 0.0, 0.0
            continue
        nonfinite, close = 0, True
        for c64, r64 in chunks(c, r):  # float64 copies of one chunk at a time: big outputs fit
            nonfinite += int((~torch.isfinite(c64) & torch.isfinite(r64)).sum())
            diff = (c64 - r64).abs().nan_to_num(0.0)
            if diff.numel():
                max_abs = max(max_abs, float(diff.max()))
                max_rel = max(max_rel, float((diff / r64.abs().clamp_min(1e-12)).max()))
            close = close and torch.allclose(
                c64, r64, atol=precision.atol, rtol=precision.rtol, equal_nan=True
            )
        if nonfinite:
            return False, f"output {i}: {nonfinite} NaN/Inf values where the reference is finite", 0.0, 0.0
        if not close:
            return (
                False,
                f"output {i} differs: max abs err {max_abs:.3e}, max rel err {max_rel:.3e} "
                f"(atol={precision.atol}, rtol={precision.rtol})",
                max_abs,
                max_rel,
            )
    return True, "", max_abs, max_rel


def rel_err(out: Any, ref64: Any) -> float:
    """The worst relative L2 error of ``out``'s floating outputs against ``ref64``."""
    worst = 0.0
    for o, r in zip(flatten(out), flatten(ref64), strict=False):
        if isinstance(o, torch.Tensor) and isinstance(r, torch.Tensor) and r.is_floating_point():
            num = den = 0.0
            for co, cr in chunks(o, r):
                num += float(torch.linalg.vector_norm(co - cr)) ** 2
                den += float(torch.linalg.vector_norm(cr)) ** 2
            worst = max(worst, num**0.5 / (den**0.5 or 1.0))
    return worst


def same(a: Any, b: Any) -> bool:
    """The same values (NaN equal to NaN), shapes and dtypes, element for element."""
    fa, fb = flatten(a), flatten(b)
    if len(fa) != len(fb):
        return False
    for x, y in zip(fa, fb, strict=True):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            for cx, cy in chunks(x, y, to_double=False):
                if not torch.equal(cx.nan_to_num(0.0), cy.nan_to_num(0.0)) or not torch.equal(
                    cx.isnan(), cy.isnan()
                ):
                    return False
        elif x is not y and x != y:
            return False
    return True


def chunks(
    x: torch.Tensor, y: torch.Tensor, to_double: bool = True
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Matching slices of two same-shaped tensors, CHUNK elements at a time: comparisons make
    temporaries of one slice, not of a whole multi-GB tensor."""
    fx, fy = x.reshape(-1), y.reshape(-1)
    for start in range(0, max(fx.numel(), 1), CHUNK):
        cx, cy = fx[start : start + CHUNK], fy[start : start + CHUNK]
        yield (cx.double(), cy.double()) if to_double else (cx, cy)
