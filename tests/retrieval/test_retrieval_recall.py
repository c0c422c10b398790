"""The labelled query set: recall@3 over the shipped guides and sheets and the fixture kernels."""

from __future__ import annotations

import json
from pathlib import Path

QUERIES = Path(__file__).parent.parent / "fixtures" / "retrieval" / "queries.json"


def _labelled() -> list[dict]:
    return json.loads(QUERIES.read_text())["queries"]


def test_the_query_set_is_large_enough_and_names_real_chunks(retrieval_chunks):
    queries = _labelled()
    assert len(queries) >= 30
    ids = {c.id for c in retrieval_chunks}
    missing = [i for q in queries for i in q["expect"] if i not in ids]
    assert not missing, f"queries.json expects ids the corpus does not have: {missing}"


def test_recall_at_3_is_at_least_0_9(retrieval_store):
    from kforge.retrieval import gpu_filter

    found = total = 0
    misses = []
    for q in _labelled():
        kinds = [q["kind"]] if "kind" in q else ["hardware", "guide", "kernel"]
        where = gpu_filter(q["gpu"]) if "gpu" in q else None
        top = [h.id for h in retrieval_store.search(q["query"], k=3, kinds=kinds, where=where)]
        hit = [i for i in q["expect"] if i in top]
        found += len(hit)
        total += len(q["expect"])
        if len(hit) < len(q["expect"]):
            misses.append((q["query"], q["expect"], top))
    recall = found / total
    print(f"recall@3 = {recall:.3f} over {total} expected ids; misses: {misses}")
    assert recall >= 0.9, misses
