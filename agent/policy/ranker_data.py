"""Training examples for the ranker: read from recorded trajectories (``trajectories.db``
files in run or batch folders) through the store's reading API, or generated synthetically.

The embedded policy writes the task's features as a ``features: {...}`` line at the end of
its plan, so a trajectory carries what the ranker needs; a plan without one (an LLM run)
contributes no examples.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from ...tools.result import Status
from ..store import Trajectory, TrajectoryStore
from .features import TaskFeatures
from .ranker import FAILED_LOG2, Example
from .strategies.registry import family_of

FEATURES_PREFIX = "features: "


def features_line(features: TaskFeatures) -> str:
    return FEATURES_PREFIX + json.dumps(features.to_json(), sort_keys=True)


def split_features(plan: str) -> tuple[str, str]:
    """(the plan as people read it, its machine-readable features line or ""): the line is
    for the ranker's training data, not for the screen."""
    lines = plan.splitlines()
    kept = [line for line in lines if not line.startswith(FEATURES_PREFIX)]
    machine = next((line for line in reversed(lines) if line.startswith(FEATURES_PREFIX)), "")
    return "\n".join(kept).strip(), machine


def parse_features(plan: str) -> TaskFeatures | None:
    for line in reversed(plan.splitlines()):
        if line.startswith(FEATURES_PREFIX):
            return TaskFeatures.from_json(json.loads(line[len(FEATURES_PREFIX) :]))
    return None


def find_stores(paths: Iterable[Path]) -> list[Path]:
    """trajectories.db files: given directly, or anywhere under the given folders."""
    found: list[Path] = []
    for path in paths:
        if path.is_file() and path.suffix == ".db":
            found.append(path)
        elif path.is_dir():
            found += sorted(path.rglob("trajectories.db"))
        else:
            raise FileNotFoundError(f"{path}: no such run folder or trajectories.db")
    return list(dict.fromkeys(p.resolve() for p in found))


def run_ids(db: Path) -> list[str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return [row[0] for row in conn.execute("SELECT run_id FROM runs ORDER BY started_at")]


def trajectory_examples(trajectory: Trajectory) -> list[Example]:
    plan = trajectory.analyses.get(0, {}).get("plan", "")
    features = parse_features(plan)
    if features is None:
        return []
    vector = features.vector()
    best: dict[str, float] = {}
    for step in trajectory.steps:
        result = step.result
        if result is None or not step.attempt.strategy:
            continue
        family = family_of(step.attempt.strategy)
        if family == "combo":
            continue
        speedup = result.speedup_vs_eager if result.status is Status.OK else None
        value = math.log2(speedup) if speedup and speedup > 0 else FAILED_LOG2
        best[family] = max(best.get(family, value), value)
    return [Example(trajectory.task_name, f, vector, v) for f, v in sorted(best.items())]


def load_examples(paths: Iterable[Path]) -> list[Example]:
    examples: list[Example] = []
    for db in find_stores(paths):
        store = TrajectoryStore(db)
        for run_id in run_ids(db):
            for trajectory in store.trajectories(run_id):
                examples += trajectory_examples(trajectory)
        store.close()
    return examples
