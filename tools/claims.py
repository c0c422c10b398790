"""The judge's checks of what the candidate worker claims about its timed calls.

The candidate's process owns its CUDA context, so only it can time its kernels; its times
are claims. Three checks, each against something the judge controls:

- **Outputs.** Every timed call's checksum (:mod:`.checksum`) must fit the float64 answer for
  the input set that call ran on, within the precision class's error: a stale, empty or
  lower-precision output on any timed call fails, not only on the last one.
- **Wall clock.** The judge times each block from its own side (request sent, answer
  received). Per call, what the claims leave unexplained is the same for an honest
  candidate as for eager's blocks timed in this process (input switch, flush, checksum),
  plus the round trip to the worker. Work done outside the claimed region (the real output
  computed while "checksumming", a clock that runs slow, a timer that is patched) shows
  up as time the claims do not explain, and is rejected past the measured noise. On a
  loaded host a block also waits for a core when the worker is woken and when the judge is;
  a trusted echo thread of the judge, timed just before each block (:class:`.remote.Echo`),
  waits as long, and its round trip comes off that block. (A candidate that loads the host
  itself gains at most that wait: the echo waits too.)
- **Speed of light.** A time below reading the inputs and writing the outputs once at the
  copy bandwidth measured on this GPU is impossible for a correct candidate: rejected.
"""

from __future__ import annotations

import statistics
from typing import Any

import torch

from .checksum import mismatch
from .timing import MIN_ROUNDS

HIDDEN_FRACTION = 0.5  # unexplained time per call, as a fraction of the claimed median, that is rejected
HIDDEN_FLOOR_MS = {
    "cuda": 0.05,
    "cpu": 0.5,
}  # below this, unexplained time is noise (host jitter, context switches)
IPC_CAP_MS = 0.5  # the most a block's round trip to the worker is allowed to explain
MIN_BLOCKS = MIN_ROUNDS  # blocks a side needs before its unexplained time is a verdict (fewer: a note)
OVERHEAD_JITTER = 0.25  # a loaded host stretches the honest overhead (input switch, checksum) by this much
LIGHT_MARGIN = 0.75  # a claim under this fraction of the byte floor is rejected


def stale_reason(checksums: list[Any], sets: list[int], expected: list[Any], limit: float) -> str:
    """Why some timed call's output does not fit its input set's answer (empty when all do).
    ``expected[s]`` is (checksums, norms) of the float64 answer on set ``s``. When every call
    that misses is close to its answer, the precision was lowered; otherwise the output is
    stale (a constant output lands close by chance on about one call in a hundred, not on all)."""
    misses, far = [], []
    for i, (claimed, turn) in enumerate(zip(checksums, sets, strict=True)):
        if turn not in (0, 1):
            return f"timed call {i + 1} names no input set"
        sums, scale = expected[turn]
        problem, close = mismatch(claimed, sums, scale, limit)
        if problem:
            misses.append(f"timed call {i + 1}: {problem}")
            far += [] if close else [misses[-1]]
    if not misses:
        return ""
    if not far:
        return f"precision lowered on {len(misses)} of {len(sets)} timed calls: {misses[0]}"
    return f"what was timed is not what was verified (stale or cached results): {far[0]}"


def unexplained_ms(
    walls: list[float], claims: list[float], block: int, waits: list[float] | None = None
) -> list[float]:
    """Per block: wall time the claims do not explain, per timed call (the untimed opening
    call counted as one more call at the block's median), less ``waits[b]``, the trusted
    echo's round trip just before block ``b``."""
    per_block = []
    for b, wall in enumerate(walls):
        times = claims[b * block : (b + 1) * block]
        if not times:
            break
        opening = statistics.median(times) if block > 1 else 0.0
        wait = waits[b] if waits and b < len(waits) else 0.0
        per_block.append((wall - sum(times) - opening - wait) / block)
    return per_block


def hidden_time_reason(
    device: str,
    candidate: tuple[list[float], list[float]],
    trusted: list[tuple[list[float], list[float]]],
    block: int,
    round_trip_ms: float,
    echoes: list[float] | None = None,
) -> tuple[str, str, bool]:
    """(reason to reject, or "", a line for the log, whether the pass is doubtful).
    ``candidate`` and each ``trusted`` slot are (block walls, claimed times), all from the
    same rounds; ``echoes``, the trusted echo's round trip before each candidate block. A pass
    is doubtful when only the trusted side's noise let it through: on a quiet host the same
    hidden time would be rejected (the judge times again before it believes it)."""
    waits = echoes or []
    mine = unexplained_ms(*candidate, block, waits)
    theirs = [x for walls, claims in trusted for x in unexplained_ms(walls, claims, block)]
    if len(mine) < MIN_BLOCKS or len(theirs) < MIN_BLOCKS:
        return "", f"wall-clock check: not made ({len(mine)} candidate blocks, {MIN_BLOCKS} needed)", False
    # The noise is the trusted side's: the candidate's own spread grows with the work it hides.
    baseline, centre = statistics.median(theirs), statistics.median(mine)
    noise = statistics.median(abs(x - baseline) for x in theirs)
    ipc = min(round_trip_ms, IPC_CAP_MS) / block
    hidden = centre - baseline - ipc
    claimed = statistics.median(candidate[1])
    quiet = max(HIDDEN_FRACTION * claimed, HIDDEN_FLOOR_MS.get(device, 0.5))
    allowed = max(quiet, 4 * noise, OVERHEAD_JITTER * abs(baseline))
    line = (
        f"wall-clock check: {hidden:.4f} ms a call not explained by the claims "
        f"(allowed {allowed:.4f}; eager's unexplained {baseline:.4f} +- {noise:.4f}, round trip {round_trip_ms:.3f}"
        + (f"; echo a block {statistics.median(waits):.3f}" if waits else "")
        + ")"
    )
    if hidden > allowed:
        return (
            f"timing claims do not add up: the judge's clock saw {hidden:.3f} ms a call more than the "
            f"candidate claims ({claimed:.3f} ms): work outside the timed region, or a forged clock",
            line,
            False,
        )
    return "", line, hidden > quiet


def light_floor_ms(moved_bytes: float, copy_gbps: float | None) -> float | None:
    return moved_bytes / (copy_gbps * 1e9) * 1e3 if copy_gbps else None


def light_reason(claimed_ms: float, moved_bytes: float, copy_gbps: float | None) -> str:
    floor = light_floor_ms(moved_bytes, copy_gbps)
    if floor is None or claimed_ms >= LIGHT_MARGIN * floor:
        return ""
    return (
        f"faster than the speed of light: {claimed_ms:.4f} ms claimed, but reading the inputs and "
        f"writing the outputs once ({moved_bytes / 2**20:.1f} MiB) takes {floor:.4f} ms at this GPU's "
        f"measured copy bandwidth ({copy_gbps:.0f} GB/s)"
    )


def copy_bandwidth_gbps(device: torch.device, mib: int = 256) -> float | None:
    """Device-to-device copy bandwidth (bytes read + written per second), best of five; None
    on the CPU, whose caches make a byte floor meaningless for small inputs."""
    if device.type != "cuda":
        return None
    src = torch.empty(mib * 2**20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(6):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end))
    return 2 * src.numel() / (best * 1e-3) / 1e9
