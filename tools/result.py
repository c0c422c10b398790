"""The Result of evaluating one candidate: a typed status and every measured figure.

Units are in the names (``*_ms``, ``*_tflops``). A figure that was not measured is
``None``; a failure is a status with its real message in ``log``, never a sentinel.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

COMPILE_FAILED = "torch.compile baseline failed"  # the log's note (Result.compile_failed)


class Status(enum.StrEnum):
    OK = "ok"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    INCORRECT = "incorrect"
    REJECTED = "rejected"  # a detected cheat
    TIMEOUT = "timeout"
    FORMAT_ERROR = "format_error"


@dataclasses.dataclass
class Timing:
    """Median and spread of one callable's run time, in milliseconds."""

    median_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float
    trials: int

    @property
    def spread(self) -> float:
        """Inter-quartile range over the median: the relative noise of the measurement."""
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else 0.0


@dataclasses.dataclass
class Roofline:
    flops: float
    min_bytes: float
    floor_ms: float | None  # None when the hardware is unknown
    bound: str  # "compute" or "memory"
    gpu: str | None
    peak_tflops: float | None
    peak_gbps: float | None


# Derived figures (properties of Result) that its JSON carries beside the stored fields.
HEADLINE_FIGURES = (
    "candidate_ms",
    "eager_ms",
    "compile_ms",
    "speedup_vs_eager",
    "speedup_vs_compile",
    "roofline_fraction",
)


@dataclasses.dataclass
class Result:
    status: Status
    backend: str = "unknown"
    precision: str = "fp32"
    device: str = "cuda"
    correct: bool = False
    trials: int = 0
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    fp64_rel_err: float | None = None  # ||out - ref64|| / ||ref64|| of the candidate
    ref_fp64_rel_err: float | None = None  # the same figure for the reference Model
    candidate: Timing | None = None
    eager: Timing | None = None
    compiled: Timing | None = None
    roofline: Roofline | None = None
    cheats: list[str] = dataclasses.field(default_factory=list)
    flags: list[str] = dataclasses.field(default_factory=list)
    ncu: dict[str, Any] | None = None
    sanitizer: dict[str, Any] | None = None
    containment: list[str] = dataclasses.field(default_factory=list)  # the candidate worker's layers
    timing_label: str = ""  # "cuda events" or "cpu wall clock (not GPU time)"
    # Memory (tools/memory.py): one set of inputs, the reference's outputs, the most one
    # candidate call allocated (its output included), and the evaluation's peak: device
    # memory on the GPU, the worker's resident memory above its start on the CPU.
    inputs_mb: float | None = None
    outputs_mb: float | None = None
    candidate_memory_mb: float | None = None
    peak_memory_mb: float | None = None
    log: str = ""
    source_hash: str = ""

    @property
    def candidate_ms(self) -> float | None:
        return self.candidate.median_ms if self.candidate else None

    @property
    def eager_ms(self) -> float | None:
        return self.eager.median_ms if self.eager else None

    @property
    def compile_ms(self) -> float | None:
        return self.compiled.median_ms if self.compiled else None

    @property
    def compile_failed(self) -> bool:
        """torch.compile of the reference failed or ran past its share of the time (the log says
        so): a candidate that compiles would do the same."""
        return COMPILE_FAILED in self.log

    @property
    def speedup_vs_eager(self) -> float | None:
        """None unless the status is ok: a rejected candidate's timings are kept, never counted."""
        return _ratio(self.eager_ms, self.candidate_ms) if self.status == Status.OK else None

    @property
    def speedup_vs_compile(self) -> float | None:
        return _ratio(self.compile_ms, self.candidate_ms) if self.status == Status.OK else None

    @property
    def roofline_fraction(self) -> float | None:
        """Floor time over measured time: 1.0 means at the hardware limit. The floor comes from
        the reference's FLOPs, so a candidate that does fewer (an algebraic shortcut) can
        exceed 1; the result is flagged when it does."""
        if self.roofline is None or self.roofline.floor_ms is None:
            return None
        return _ratio(self.roofline.floor_ms, self.candidate_ms)

    def headline(self) -> dict[str, Any]:
        """The status and the figures people compare: times, speedups, roofline fraction."""
        return {"status": self.status.value} | {name: getattr(self, name) for name in HEADLINE_FIGURES}

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | self.headline()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in fields}
        kwargs["status"] = Status(data["status"])
        for name in ("candidate", "eager", "compiled"):
            if kwargs.get(name) is not None:
                kwargs[name] = Timing(**kwargs[name])
        if kwargs.get("roofline") is not None:
            kwargs["roofline"] = Roofline(**kwargs["roofline"])
        return cls(**kwargs)

    def dumps(self) -> str:
        return json.dumps(self.to_json())


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den
