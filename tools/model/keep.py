"""The keep step of ``kforge model``'s end-to-end measurement: which of the patch's regions
stay. Each region's replacement alone in the model, timed beside eager in interleaved rounds,
must make the model at least SURVIVES faster; all the regions together are timed in the same
rounds, and kept together when they beat both eager and the survivors alone (a replacement
that hands on another memory layout loses alone and wins with every region swapped). The kept
set is verified against float64 again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import e2e, spec

SURVIVES = 1.01  # a region's replacement alone must make the model this much faster than eager


def regions(
    variant: Callable[[set[int] | None], e2e.Forward],
    eager: e2e.Forward,
    ref64: torch.nn.Module,
    loaded: spec.Loaded,
    job: dict[str, Any],
    out: dict[str, Any],
) -> set[int]:
    """The regions to keep, verified together (none when together they are wrong): those
    whose replacement alone makes the model faster than eager, or all of them when together
    they are faster still. A replacement that hands on another memory layout (channels-last
    convolutions) can lose alone, its output slowing the untouched regions after it, and win
    when every region takes that layout."""
    n, inputs, device = len(job["patch"]), loaded.inputs, torch.device(job["device"])
    timed: dict[str, Any] = {}  # each variant's last timed output, checked below

    def timer(variants: dict[str, e2e.Forward]) -> dict[str, float]:
        return e2e.time_variants(variants, inputs, device, int(job.get("trials", 30)), timed)

    everything = set(range(n))
    variants = {"eager": eager} | {f"r{i}": variant({i}) for i in range(n)}
    if n > 1:
        variants["together"] = variant(everything)
    alone = timer(variants)
    kept = {i for i in range(n) if alone[f"r{i}"] * SURVIVES < alone["eager"]}
    out["alone"] = {str(i): alone["eager"] / alone[f"r{i}"] for i in range(n)}
    if n > 1:
        out["together"] = alone["eager"] / alone["together"]
        kept = _alone_or_together(kept, everything, alone, variant, eager, timer)
    out["wrong_alone"] = e2e.timed_errors(timed, ref64, inputs, str(job["precision"]))
    out["kept"] = sorted(kept)
    if kept:
        ok, why, err = e2e.verify(
            ref64, eager, variant(kept), inputs, str(job["precision"]), seed=1 + int(job.get("seed", 0))
        )
        out["verified"] = {"correct": ok, "reason": why, "error": err}
        if not ok:
            kept = set()
            out["kept"] = []
    return kept


def _alone_or_together(
    kept: set[int],
    everything: set[int],
    times: dict[str, float],
    variant: Callable[[set[int]], e2e.Forward],
    eager: e2e.Forward,
    timer: Callable[[dict[str, e2e.Forward]], dict[str, float]],
) -> set[int]:
    """The survivors alone, or every region when together they beat both eager and the
    survivors (timed again beside them when there are several)."""
    if kept == everything or times["together"] * SURVIVES >= times["eager"]:
        return kept
    together = times["together"]
    if len(kept) <= 1:
        theirs = times[f"r{min(kept)}"] if kept else times["eager"]
    else:  # the survivors' time together is unknown: both again, in eager's units of the first round
        again = timer({"eager": eager, "survivors": variant(kept), "together": variant(everything)})
        scale = times["eager"] / again["eager"]
        theirs, together = again["survivors"] * scale, again["together"] * scale
    return everything if together < theirs else kept


def which(name: str) -> str:
    """A variant of the keep step ("r3", "together", "survivors"), in words."""
    if name == "together":
        return "the regions together in the model"
    if name == "survivors":
        return "the regions that survived alone, together in the model"
    return f"region {name[1:]} alone in the model"
