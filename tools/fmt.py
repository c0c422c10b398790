"""How kforge writes numbers: one place, so every table and line agrees (stdlib only)."""

from __future__ import annotations

import math
from collections.abc import Iterable

MISSING = "-"


def num(value: float | None, unit: str = "", digits: int = 4) -> str:
    """`value` to `digits` significant figures with its unit, or '-' when there is none."""
    return MISSING if value is None else f"{value:.{digits}g}{unit}"


def ms(value: float | None, digits: int = 4) -> str:
    """A time in milliseconds: '0.1234 ms' (significant figures), '-' when missing."""
    return num(value, " ms", digits)


def ratio(value: float | None, decimals: int = 2) -> str:
    """A speedup: '1.23x', '-' when missing."""
    return MISSING if value is None else f"{value:.{decimals}f}x"


def geomean(values: Iterable[float | None]) -> float | None:
    """The geometric mean of the positive values; None when there are none (never NaN)."""
    logs = [math.log(v) for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(logs) / len(logs)) if logs else None
