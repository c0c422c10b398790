"""Output comparison: the candidate's outputs against the reference's under a precision
class's tolerance, error figures against a float64 reference, and bitwise sameness. Tensors
are compared slice by slice (CHUNK elements), so multi-GB outputs fit on the GPU beside
their float64 temporaries."""

from __future__ import annotations

import dataclasses
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


FP64_NOTE = (
    "matched the float64 reference within the tolerance where the float32 reference itself is "
    "off by more (a more accurate result than eager's)"
)
EAGER_ERROR_NOTE = (
    "matched the float64 reference within the tolerance widened by eager's own largest error on "
    "that call (a float32 result as accurate as eager's, rounded at other elements)"
)


# The widening is at most this many times the class's atol: where eager is off by far more (one
# element that cancels catastrophically), its largest error says little of the others, and only
# a result closer to the truth than eager's passes (FP64_NOTE).
EAGER_ERROR_CAP = 10.0


def fp64_agreement(cand_out: Any, ref_out: Any, out64: Any, precision: PrecisionClass) -> str:
    """Why the candidate's output is correct though it missed eager's float32 output ("": it
    is not), given ``out64``, the reference run in float64. The exact answer (rounded to the
    output dtype) is a correct answer too: a candidate more accurate than eager, say one that
    sums in float64, can differ from eager's output by eager's own error (FP64_NOTE). And where
    eager itself is off by about the tolerance, a result as accurate as eager's but rounded at
    other elements misses both: ChatGLM3's block (unseen8, H200, a 13696-long reduction) had
    torch.compile's own output and a 3xTF32 one, both closer to float64 than eager overall
    (4.6e-6 against 5.4e-6), off by 1.27e-4 at an element near zero. So each output may also be
    off the exact answer by the tolerance plus eager's largest error on that output
    (EAGER_ERROR_NOTE): eager's own error is what a float32 computation of the task gets wrong.
    The float64 norm check still bounds the whole output (precision lowered past ten times
    eager's error is rejected)."""
    cands, refs, exact = flatten(cand_out), flatten(ref_out), flatten(out64)
    if len(refs) != len(exact) or len(cands) != len(refs):
        return ""
    rounded = [
        e.to(r.dtype)
        if isinstance(e, torch.Tensor) and isinstance(r, torch.Tensor) and r.is_floating_point()
        else e
        for e, r in zip(exact, refs, strict=True)
    ]
    if compare(cands, rounded, precision)[0]:
        return FP64_NOTE
    for c, r, e in zip(cands, refs, rounded, strict=True):
        band = precision
        if isinstance(r, torch.Tensor) and r.is_floating_point() and isinstance(e, torch.Tensor):
            own = compare([r], [e], precision)[2]  # eager's largest error on this output
            band = dataclasses.replace(
                precision, atol=precision.atol + min(own, EAGER_ERROR_CAP * precision.atol)
            )
        if not compare([c], [e], band)[0]:
            return ""
    return EAGER_ERROR_NOTE


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
