"""Datasets from trajectory stores, in the chat formats TRL reads (JSONL that ``datasets`` loads).

- ``sft``: ``prompt`` (system + user messages kforge sent or would send) and ``completion``
  (the assistant's answer: analysis, plan and code of a verified candidate at least
  ``min_speedup`` times faster than eager).
- ``pairs``: ``prompt``, ``chosen``, ``rejected``: within one round of one task, a verified
  candidate over a slower verified one (by ``margin`` at least) or over one that failed.
- ``groups``: one prompt that carries the measured variants of earlier rounds, and the
  candidates that followed it with their rewards (``reward.reward_of``); ``task_name`` and
  ``task_source`` let GRPO's reward evaluate new answers to the same prompt.

Rejected (cheating) attempts are never a target (``completion``, ``chosen`` or a group's
candidate), and neither is any attempt whose source is the same (same source hash) as one
rejected in any run of the exported stores, nor a best that failed the batch's confirmation
(measured again on new inputs). Tasks are split whole into train and test; duplicates are
removed.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...tools.result import Status
from .card import write_card
from .reward import reward_of
from .samples import Sample

KINDS = ("sft", "pairs", "groups")
Record = dict[str, Any]


def _assistant(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def _speedup(sample: Sample) -> float | None:
    return sample.result.speedup_vs_eager if sample.result.status is Status.OK else None


def cheat_hashes(samples: list[Sample]) -> set[str]:
    """The source hashes of every candidate rejected as a cheat, in its evaluation or in the
    batch's confirmation, in any of the samples' runs."""
    return {
        s.source_hash
        for s in samples
        if s.result.status is Status.REJECTED or s.confirmation is Status.REJECTED
    }


def trusted(samples: list[Sample]) -> list[Sample]:
    """The samples that may be a target: not a cheat's source, not a failed confirmation."""
    cheats = cheat_hashes(samples)
    return [s for s in samples if s.source_hash not in cheats and s.confirmation in (None, Status.OK)]


def sft_records(samples: list[Sample], min_speedup: float = 1.0) -> list[Record]:
    return [
        {
            "prompt": s.prompt,
            "completion": _assistant(s.answer),
            "task_name": s.task_name,
            "speedup": _speedup(s),
            "attempt": f"{s.run_id}/{s.attempt_id}",
        }
        for s in trusted(samples)
        if _verified_at_least(s, min_speedup)
    ]


def _verified_at_least(sample: Sample, min_speedup: float) -> bool:
    speedup = _speedup(sample)
    return speedup is not None and speedup >= min_speedup


def _by_round(samples: list[Sample]) -> dict[tuple[str, int], list[Sample]]:
    groups: dict[tuple[str, int], list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.run_id, s.round), []).append(s)
    return groups


def _prefers(good: Sample, bad: Sample, margin: float) -> bool:
    fast, slow = _speedup(good), _speedup(bad)
    if fast is None or not bad.answer.strip():
        return False
    if bad.result.status is Status.OK:
        return slow is not None and fast >= slow * margin
    return True  # verified over incorrect, failing or rejected


def pair_records(samples: list[Sample], margin: float = 1.05) -> list[Record]:
    out: list[Record] = []
    targets = {(s.run_id, s.attempt_id) for s in trusted(samples)}
    for members in _by_round(samples).values():
        for good in (m for m in members if (m.run_id, m.attempt_id) in targets):
            for bad in members:
                if good is not bad and _prefers(good, bad, margin):
                    out.append(
                        {
                            "prompt": good.prompt,
                            "chosen": _assistant(good.answer),
                            "rejected": _assistant(bad.answer),
                            "task_name": good.task_name,
                            "chosen_speedup": _speedup(good),
                            "rejected_status": bad.result.status.value,
                            "rejected_speedup": _speedup(bad),
                        }
                    )
    return out


def group_records(samples: list[Sample]) -> list[Record]:
    """One record per round that follows measured variants; cheats, their copies and failed
    confirmations are left out of the candidates."""
    out: list[Record] = []
    targets = {(s.run_id, s.attempt_id) for s in trusted(samples)}
    for members in _by_round(samples).values():
        first = members[0]
        candidates = [
            s
            for s in members
            if (s.run_id, s.attempt_id) in targets
            and s.result.status is not Status.REJECTED
            and s.answer.strip()
        ]
        if not first.earlier or not candidates:
            continue
        out.append(
            {
                "prompt": first.prompt,
                "task_name": first.task_name,
                "task_source": first.task_source,
                "variants": [
                    {
                        "attempt": v.attempt_id,
                        "status": v.result.status.value,
                        "speedup": v.result.speedup_vs_eager,
                    }
                    for v in first.earlier
                ],
                "candidates": [
                    {
                        "completion": _assistant(s.answer),
                        "status": s.result.status.value,
                        "speedup": _speedup(s),
                        "reward": reward_of(s.result),
                    }
                    for s in candidates
                ],
            }
        )
    return out


BUILDERS: dict[str, Callable[[list[Sample]], list[Record]]] = {
    "sft": sft_records,
    "pairs": pair_records,
    "groups": group_records,
}


def dedupe(records: list[Record]) -> list[Record]:
    seen: set[str] = set()
    out = []
    for record in records:
        key = {
            k: v
            for k, v in record.items()
            if k in ("prompt", "completion", "chosen", "rejected", "candidates")
        }
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        if digest not in seen:
            seen.add(digest)
            out.append(record)
    return out


def split_tasks(tasks: list[str], test_fraction: float) -> set[str]:
    """The test tasks: a fixed, hash-ordered share of the tasks (at least one when there are two)."""
    if test_fraction <= 0 or len(tasks) < 2:
        return set()
    ordered = sorted(set(tasks), key=lambda t: hashlib.sha256(t.encode()).hexdigest())
    count = min(len(ordered) - 1, max(1, math.floor(len(ordered) * test_fraction + 0.5)))
    return set(ordered[:count])


def export(
    kind: str, samples: list[Sample], out: Path, *, test_fraction: float = 0.2, **options: Any
) -> Path:
    """Write ``out/train.jsonl``, ``out/test.jsonl`` and the card; returns ``out``."""
    if kind not in BUILDERS:
        raise ValueError(f"unknown dataset kind {kind!r}: one of {', '.join(KINDS)}")
    records = dedupe(BUILDERS[kind](samples, **options))
    test_tasks = split_tasks([s.task_name for s in samples], test_fraction)
    splits = {
        "train": [r for r in records if r["task_name"] not in test_tasks],
        "test": [r for r in records if r["task_name"] in test_tasks],
    }
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in splits.items():
        with (out / f"{name}.jsonl").open("w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    write_card(out, kind, splits, sources=sorted({s.run_id for s in samples}))
    return out
