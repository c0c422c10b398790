"""The patched model against the original, end to end: verified on fresh inputs with the
task rules (a float64 reference, the precision class's bound), then timed in one run beside
eager and torch.compile of the whole model, interleaved (:meth:`..timing.Timer.time_many`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..compare import rel_err
from ..precision import get_precision
from ..timing import LocalSlot, Slot, Timer
from ..trees import clone, flatten

Forward = Callable[..., Any]


def fresh_inputs(example: list[Any], generator: torch.Generator) -> list[Any]:
    """New inputs like the example ones: floats drawn at their spread, integers (token ids)
    in their range, anything else as given."""
    out = []
    for x in example:
        if not isinstance(x, torch.Tensor):
            out.append(x)
        elif x.is_floating_point():
            spread = float(x.float().std()) if x.numel() > 1 else 1.0
            drawn = torch.randn(x.shape, generator=generator) * (spread or 1.0)
            out.append(drawn.to(device=x.device, dtype=x.dtype))
        elif x.dtype == torch.bool:
            out.append((torch.rand(x.shape, generator=generator) < 0.5).to(x.device))
        else:
            low, high = (int(x.min()), int(x.max()) + 1) if x.numel() else (0, 1)
            out.append(torch.randint(low, high, x.shape, generator=generator, dtype=x.dtype).to(x.device))
    return out


def verify(
    ref64: torch.nn.Module,
    original: Forward,
    patched: Forward,
    example: list[Any],
    precision: str,
    trials: int = 3,
    seed: int = 0,
) -> tuple[bool, str, float]:
    """(correct, why not, worst error vs float64) of ``patched`` over ``trials`` fresh inputs;
    ``ref64`` is the original model in float64. Each output must be within max(the class's
    bound, 10x eager's own error) of float64."""
    bound = get_precision(precision).max_fp64_rel_err
    generator = torch.Generator().manual_seed(seed)
    worst = 0.0
    for trial in range(trials):
        inputs = fresh_inputs(example, generator)
        wide = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        with torch.no_grad():
            want, eager, got = ref64(*wide), original(*inputs), patched(*inputs)
        if len(flatten(got)) != len(flatten(eager)):
            return False, f"trial {trial + 1}: the patched model returns a different structure", worst
        for i, (g, e) in enumerate(zip(flatten(got), flatten(eager), strict=True)):
            if isinstance(e, torch.Tensor) and (not isinstance(g, torch.Tensor) or g.shape != e.shape):
                return False, f"trial {trial + 1}: output {i} has another shape", worst
            if isinstance(g, torch.Tensor) and g.is_floating_point() and not torch.isfinite(g).all():
                return False, f"trial {trial + 1}: output {i} holds NaN or Inf", worst
        error, eager_error = rel_err(got, want), rel_err(eager, want)
        worst = max(worst, error)
        limit = max(bound, 10 * eager_error)
        if error > limit:
            return False, f"trial {trial + 1}: error vs float64 {error:.2e} over {limit:.2e}", worst
    return True, "", worst


def time_variants(
    variants: dict[str, Forward],
    inputs: list[Any],
    device: torch.device,
    trials: int = 30,
    outputs: dict[str, Any] | None = None,
) -> dict[str, float]:
    """Median ms of each whole-model forward, timed in the same interleaved rounds; each
    variant's last timed output goes in ``outputs`` when given."""
    timer = Timer(device, trials=trials)
    last = outputs if outputs is not None else {}
    with torch.no_grad():
        slots: dict[str, Slot] = {
            name: LocalSlot(timer, _bound(fn, inputs, last, name)) for name, fn in variants.items()
        }
        timings = timer.time_many(slots)
    return {name: t.median_ms for name, t in timings.items()}


def _bound(fn: Forward, inputs: list[Any], last: dict[str, Any], name: str) -> Callable[[], Any]:
    def call() -> Any:  # a copy: a CUDA graph's output is overwritten by the next replay
        last[name] = out = clone(fn(*inputs))
        return out

    return call


def timed_errors(
    outputs: dict[str, Any], ref64: torch.nn.Module, inputs: list[Any], precision: str
) -> list[str]:
    """The variants whose timed output is not within the verification's bound of float64 on
    the timing inputs (a replacement that computes the answer only while it is verified)."""
    if "eager" not in outputs:  # nothing timed (a test's stand-in for the timer)
        return []
    wide = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        want = ref64(*wide)
    limit = max(get_precision(precision).max_fp64_rel_err, 10 * rel_err(outputs["eager"], want))
    return [name for name, out in outputs.items() if rel_err(out, want) > limit]
