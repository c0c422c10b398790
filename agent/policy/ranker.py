"""The strategy cost model: one ridge regression per strategy family, predicting the log2
speedup over eager that the family's candidate reaches from the task's features (a failed
candidate counts as 0.5x). The planner tries families in the order of their predictions.

Dependency-free (fits with Gaussian elimination on a 13x13 system) and saved as JSON in the
package (``ranker_model.json``); ``kforge train ranker`` refits it from trajectories.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from .features import FEATURE_NAMES
from .strategies.registry import DEFAULT_ORDER

FAILED_LOG2 = -1.0  # a failed candidate scores as a 0.5x slowdown
UNSEEN_SCORE = -2.0  # a family the model never saw ranks after every seen one
MIN_EXAMPLES = 3
MIN_MEASURED = 5  # fit_with_prior: a family measured this often needs no synthetic prior
MODEL_FILE = "ranker_model.json"


@dataclasses.dataclass
class Example:
    """One measured candidate: the task's feature vector, its family, log2 speedup (or FAILED_LOG2)."""

    task: str
    family: str
    features: list[float]
    log2_speedup: float


@dataclasses.dataclass
class RankerModel:
    weights: dict[str, list[float]]  # family -> one weight per feature
    counts: dict[str, int]  # examples per family
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    def score(self, family: str, vector: Sequence[float]) -> float:
        w = self.weights.get(family)
        if w is None or len(w) != len(vector):
            return UNSEEN_SCORE - _default_rank(family) * 0.01
        return sum(a * b for a, b in zip(w, vector, strict=True))

    def order(self, families: Iterable[str], vector: Sequence[float]) -> list[str]:
        """Families best first; ties keep the fixed default order."""
        unique = list(dict.fromkeys(families))
        return sorted(unique, key=lambda f: (-self.score(f, vector), _default_rank(f)))

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "feature_names": FEATURE_NAMES,
            "weights": self.weights,
            "counts": self.counts,
            "metadata": self.metadata,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RankerModel:
        if data.get("feature_names") != FEATURE_NAMES:
            raise ValueError("ranker model was fit on other features: refit it with kforge train ranker")
        return cls(weights=data["weights"], counts=data["counts"], metadata=data.get("metadata", {}))

    def save(self, path: Path) -> None:
        data = self.to_json()
        text = json.dumps({k: v for k, v in data.items() if k != "weights"}, indent=1)[:-2]
        rows = ",\n".join(f"  {json.dumps(f)}: {json.dumps(w)}" for f, w in sorted(self.weights.items()))
        path.write_text(text + ',\n "weights": {\n' + rows + "\n }\n}\n")


def _default_rank(family: str) -> int:
    return DEFAULT_ORDER.index(family) if family in DEFAULT_ORDER else len(DEFAULT_ORDER)


def fixed_order(families: Iterable[str]) -> list[str]:
    return sorted(dict.fromkeys(families), key=_default_rank)


def fit(examples: list[Example], ridge: float = 0.3, metadata: dict[str, Any] | None = None) -> RankerModel:
    by_family: dict[str, list[Example]] = {}
    for ex in examples:
        by_family.setdefault(ex.family, []).append(ex)
    weights: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    for family, rows in sorted(by_family.items()):
        if len(rows) < MIN_EXAMPLES:
            continue
        fitted = _ridge([r.features for r in rows], [r.log2_speedup for r in rows], ridge)
        weights[family] = [round(w, 6) for w in fitted]
        counts[family] = len(rows)
    meta = {"fit_at": time.strftime("%Y-%m-%d %H:%M:%S"), "examples": len(examples), "ridge": ridge}
    meta.update(metadata or {})
    return RankerModel(weights=weights, counts=counts, metadata=meta)


def fit_with_prior(
    measured: list[Example],
    prior: list[Example],
    *,
    ridge: float = 0.3,
    min_measured: int = MIN_MEASURED,
    measured_weight: int = 1,
    metadata: dict[str, Any] | None = None,
) -> RankerModel:
    """Families measured at least ``min_measured`` times are fit on the measurements alone;
    the others on the prior (synthetic) examples plus what was measured of them, counted
    ``measured_weight`` times. On 85 KernelBench tasks, mixing the synthetic prior into the
    well-measured families made the first pick worse
    (docs/log/2026-11-22-kernelbench-h200-first-measurement.md)."""
    counts: dict[str, int] = {}
    for ex in measured:
        counts[ex.family] = counts.get(ex.family, 0) + 1
    enough = {family for family, n in counts.items() if n >= min_measured}
    examples = [ex for ex in measured if ex.family in enough]
    examples += [ex for ex in measured if ex.family not in enough] * measured_weight
    examples += [ex for ex in prior if ex.family not in enough]
    meta = {"measured_families": sorted(enough), "prior_families": sorted({e.family for e in prior} - enough)}
    return fit(examples, ridge=ridge, metadata=meta | (metadata or {}))


def fit_toward(
    base: RankerModel, examples: list[Example], strength: float = 4.0, metadata: dict[str, Any] | None = None
) -> RankerModel:
    """``base`` moved toward what ``examples`` measured, without the data it was fit on: per
    family, the weights minimising squared error on the examples plus ``strength`` times the
    squared distance to the base's weights (zero for a family the base lacks, which then needs
    MIN_EXAMPLES). A family with no new example keeps its base weights. Large ``strength``:
    the base; zero: the examples alone."""
    by_family: dict[str, list[Example]] = {}
    for ex in examples:
        by_family.setdefault(ex.family, []).append(ex)
    weights = {f: list(w) for f, w in base.weights.items()}
    counts = dict(base.counts)
    for family, rows in sorted(by_family.items()):
        prior = base.weights.get(family)
        if prior is None and len(rows) < MIN_EXAMPLES:
            continue
        start = (
            prior
            if prior is not None and len(prior) == len(rows[0].features)
            else [0.0] * len(rows[0].features)
        )
        fitted = _ridge([r.features for r in rows], [r.log2_speedup for r in rows], strength, start)
        weights[family] = [round(w, 6) for w in fitted]
        counts[family] = counts.get(family, 0) + len(rows)
    meta = dict(base.metadata)
    meta.update({"updated_at": time.strftime("%Y-%m-%d %H:%M:%S"), "update_examples": len(examples)})
    meta.update({"update_strength": strength, **(metadata or {})})
    return RankerModel(weights=weights, counts=counts, metadata=meta)


def _ridge(
    xs: list[list[float]], ys: list[float], ridge: float, toward: list[float] | None = None
) -> list[float]:
    """Solve (X^T X + ridge I) w = X^T y (the bias feature is not penalised); with ``toward``
    (w0), (X^T X + ridge I) w = X^T y + ridge w0, every weight (the bias too) pulled to w0."""
    n = len(xs[0])
    a = [[sum(x[i] * x[j] for x in xs) for j in range(n)] for i in range(n)]
    b = [sum(x[i] * y for x, y in zip(xs, ys, strict=True)) for i in range(n)]
    for i in range(0 if toward is not None else 1, n):
        a[i][i] += ridge
        b[i] += ridge * toward[i] if toward is not None else 0.0
    a[0][0] += 1e-6
    return _solve(a, b)


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        if abs(m[col][col]) < 1e-12:
            continue
        for r in range(n):
            if r != col and m[r][col] != 0.0:
                factor = m[r][col] / m[col][col]
                m[r] = [vr - factor * vc for vr, vc in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] if abs(m[i][i]) >= 1e-12 else 0.0 for i in range(n)]


def ndcg(ranked: list[str], gains: dict[str, float], k: int = 3) -> float:
    """Normalised discounted cumulative gain of an order against the true gains (>= 0)."""

    def dcg(order: list[str]) -> float:
        return sum(gains.get(f, 0.0) / math.log2(i + 2) for i, f in enumerate(order[:k]))

    ideal = dcg(sorted(gains, key=lambda f: -gains[f]))
    return dcg(ranked) / ideal if ideal > 0 else 1.0


def load_model(path: Path | None = None) -> RankerModel | None:
    """The model at ``path``, else at $KFORGE_RANKER, else the shipped one; None when there is none."""
    if path is None and os.environ.get("KFORGE_RANKER"):
        path = Path(os.environ["KFORGE_RANKER"])
    if path is not None:
        return RankerModel.from_json(json.loads(path.read_text()))
    resource = resources.files("kforge.agent.policy").joinpath(MODEL_FILE)
    if not resource.is_file():
        return None
    return RankerModel.from_json(json.loads(resource.read_text()))
