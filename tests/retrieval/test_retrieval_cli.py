"""kforge index and kforge search."""

from __future__ import annotations

import json
from pathlib import Path

from kforge.agent.cli import app
from typer.testing import CliRunner


def test_search_json_filters_and_bad_options(retrieval_store):
    runner = CliRunner()
    store = ["--store", str(retrieval_store.path)]
    out = runner.invoke(
        app,
        [
            "search",
            "peak tensor core TFLOP/s",
            "--kind",
            "hardware",
            "--gpu",
            "B200",
            "-k",
            "4",
            "--json",
            *store,
        ],
    )
    assert out.exit_code == 0, out.output
    hits = json.loads(out.stdout)
    assert len(hits) == 4 and {h["metadata"]["gpu"] for h in hits} == {"B200"}
    assert all(set(h) == {"id", "kind", "score", "text", "metadata"} for h in hits)
    assert runner.invoke(app, ["search", "x", "--kind", "recipes", *store]).exit_code != 0
    assert runner.invoke(app, ["search", "x", "--gpu", "Voodoo 2", *store]).exit_code != 0
    plain = runner.invoke(app, ["search", "bank conflicts", "-k", "2", *store])
    assert plain.exit_code == 0 and "guide/shared-memory-tiling#" in plain.stdout


def test_index_is_incremental_and_rebuilds(tmp_path: Path, monkeypatch, retrieval_roots):
    import kforge.retrieval.corpus as corpus

    corpus_root, examples_root = retrieval_roots
    small = [d for d in corpus.load_documents(corpus_root, examples_root) if d.id == "guide/fusion"]
    monkeypatch.setattr(corpus, "load_documents", lambda: small)
    runner = CliRunner()
    args = ["index", "--store", str(tmp_path / "s")]

    def run(*extra: str) -> str:
        result = runner.invoke(app, [*args, *extra])
        assert result.exit_code == 0, result.output
        return " ".join(result.output.split())  # rich wraps long lines

    assert "7 embedded" in run()
    assert "0 embedded, 7 unchanged" in run()
    rebuilt = run("--rebuild")
    assert "rebuilding" in rebuilt and "7 embedded" in rebuilt
