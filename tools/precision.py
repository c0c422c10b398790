"""Named precision classes and their tolerances.

fp32 is strict (atol = rtol = 1e-4, as KernelBench uses). The others only apply when
the user allows them, and the class a result was checked under is always reported.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class PrecisionClass:
    name: str
    atol: float
    rtol: float
    # Largest ||out - ref64|| / ||ref64|| expected of an honest kernel in this class.
    # A result above it in a stricter class means precision was lowered.
    max_fp64_rel_err: float


PRECISIONS: dict[str, PrecisionClass] = {
    "fp32": PrecisionClass("fp32", atol=1e-4, rtol=1e-4, max_fp64_rel_err=1e-5),
    "tf32": PrecisionClass("tf32", atol=1e-2, rtol=1e-2, max_fp64_rel_err=2e-3),
    "bf16": PrecisionClass("bf16", atol=5e-2, rtol=5e-2, max_fp64_rel_err=2e-2),
    "fp16": PrecisionClass("fp16", atol=1e-2, rtol=1e-2, max_fp64_rel_err=5e-3),
}


def get_precision(name: str) -> PrecisionClass:
    try:
        return PRECISIONS[name]
    except KeyError:
        raise ValueError(f"unknown precision class {name!r}: choose one of {', '.join(PRECISIONS)}") from None
