"""The store: incremental indexing, filters, added kernels, persistence, kill and corruption."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kforge.retrieval import Store
from kforge.retrieval.chunking import Document, chunk_document
from kforge.retrieval.store import KINDS
from kforge.tools.hardware import spec_for
from kforge.tools.result import Result, Status, Timing

pytestmark = pytest.mark.slow  # end to end: left out of the quick loop (-m 'not slow and not gpu')


def _guide(topic: str, sections: dict[str, str]) -> Document:
    text = f"# {topic}\n\n" + "\n\n".join(f"## {title}\n\n{body}" for title, body in sections.items())
    return Document(f"guide/{topic}", "guide", topic, text, {"topic": topic, "source": f"guides/{topic}.md"})


def _small_corpus(extra: str = "") -> list:
    docs = [
        _guide(
            "alpha", {"Loads": "Coalesced loads move full sectors.", "Stores": "Stores should be vectorized."}
        ),
        _guide(
            "beta", {"Banks": "Shared memory has 32 banks." + extra, "Padding": "Pad tiles by one column."}
        ),
    ]
    return [c for d in docs for c in chunk_document(d)]


def test_indexing_is_incremental(tmp_path: Path):
    store = Store(tmp_path / "s")
    first = store.index(_small_corpus())
    assert (first.total, first.embedded, first.unchanged) == (4, 4, 0)
    again = store.index(_small_corpus())
    assert (again.embedded, again.unchanged, again.deleted) == (0, 4, 0)
    changed = _small_corpus(extra=" Bank conflicts serialize accesses.")
    before = store.embedder.texts_embedded
    report = store.index(changed)
    assert report.embedded == 1 and store.embedder.texts_embedded - before == 1
    hit = store.get("guide", ids=["guide/beta#banks"])[0]
    assert "serialize" in hit.text
    shrunk = [c for c in changed if not c.id.startswith("guide/alpha")]
    report = store.index(shrunk)
    assert (report.deleted, report.total) == (2, 2)


def test_a_new_store_says_it_is_new(tmp_path: Path):
    store = Store(tmp_path / "fresh")
    assert any("no store" in n for n in store.notices)
    assert store.count() == 0


def test_filters_by_kind_gpu_and_metadata(retrieval_store):
    from kforge.retrieval import gpu_filter

    hits = retrieval_store.search(
        "shared memory per SM", k=10, kinds=["hardware"], where=gpu_filter("H100-SXM")
    )
    assert hits and {h.metadata["gpu"] for h in hits} == {"H100-SXM"}
    guides = retrieval_store.search("shared memory bank conflicts", k=5, kinds=["guide"])
    assert guides and {h.kind for h in guides} == {"guide"}
    # the GPU filter keeps chunks tied to no GPU: guides stay, other GPUs' sheets go
    mixed = retrieval_store.search("tensor core peak", k=20, where=gpu_filter("A100-SXM"))
    assert {h.metadata.get("gpu") for h in mixed} <= {"A100-SXM", None}
    assert any(h.kind == "guide" for h in mixed)
    triton = retrieval_store.search("softmax kernel", k=5, kinds=["kernel"], where={"backend": "triton"})
    assert triton and {h.metadata["backend"] for h in triton} == {"triton"}


def test_kernel_metadata_carries_measured_results(retrieval_store):
    (softmax,) = retrieval_store.get("kernel", ids=["kernel/softmax_triton"])
    meta = softmax.metadata
    assert meta["gpu"] == "H100-SXM" and meta["arch"] == "sm_90" and meta["speedup"] == pytest.approx(2.0)
    assert meta["measured_on"].endswith("H100 80GB HBM3") and meta["op"] == "softmax"
    assert "2.00x vs eager" in softmax.text
    # "incorrect" in measured.json and absent from it: no speedup metadata
    for name in ("kernel/softmax_cuda", "kernel/layernorm_cuda"):
        (hit,) = retrieval_store.get("kernel", ids=[name])
        assert "speedup" not in hit.metadata and "gpu" not in hit.metadata


def _result(status: Status = Status.OK, cheats: list[str] | None = None) -> Result:
    timing = Timing(median_ms=0.5, min_ms=0.5, max_ms=0.6, iqr_ms=0.01, trials=10)
    slower = Timing(median_ms=1.0, min_ms=1.0, max_ms=1.1, iqr_ms=0.01, trials=10)
    return Result(
        status=status,
        backend="triton",
        correct=status == Status.OK,
        candidate=timing,
        eager=slower,
        cheats=cheats or [],
    )


def test_added_kernels_are_stored_once_and_survive_a_rebuild(tmp_path: Path):
    from kforge.retrieval.added import NotVerified

    store = Store(tmp_path / "s")
    store.index(_small_corpus())
    source = "class ModelNew:  # fused gelu\n    pass\n"
    kernel_id, new = store.add_kernel(
        source, _result(), op="gelu", gpu=spec_for("H100-SXM"), summary="fused gelu"
    )
    assert new and kernel_id.startswith("kernel/")
    assert store.add_kernel(source, _result(), op="gelu", gpu=spec_for("H100-SXM")) == (kernel_id, False)
    (hit,) = store.get("kernel")
    assert hit.metadata["speedup"] == pytest.approx(2.0) and hit.metadata["origin"] == "added"
    with pytest.raises(NotVerified):
        store.add_kernel("other source", _result(Status.REJECTED), op="gelu", gpu=None)
    with pytest.raises(NotVerified):
        store.add_kernel("other source", _result(cheats=["side stream"]), op="gelu", gpu=None)
    store.index(_small_corpus())  # re-indexing the corpus keeps added kernels
    store.rebuild()
    report = store.index(_small_corpus())
    assert report.total == 5 and store.get("kernel", ids=[kernel_id])


def test_a_corrupt_store_is_moved_aside_and_rebuilt(tmp_path: Path):
    store = Store(tmp_path / "s")
    store.index(_small_corpus())
    del store
    with open(tmp_path / "s" / "chroma" / "chroma.sqlite3", "r+b") as db:
        db.write(b"this is not a database" * 200)
    import chromadb

    chromadb.api.client.SharedSystemClient.clear_system_cache()  # as a new process would see it
    reopened = Store(tmp_path / "s")
    assert any("unreadable" in n and "rebuilding" in n for n in reopened.notices), reopened.notices
    assert list((tmp_path / "s").glob("chroma.corrupt-*"))
    assert reopened.index(_small_corpus()).total == 4


KILL_SCRIPT = """
import sys
from pathlib import Path
from kforge.retrieval import Store, store as store_module
from kforge.retrieval.corpus import corpus_chunks, load_documents
store_module.BATCH_SIZE = 4
chunks = [c for c in corpus_chunks(load_documents(Path(sys.argv[2]), Path(sys.argv[3]))) if c.kind == "hardware"]
store = Store(Path(sys.argv[1]))
def progress(done, total):
    print(f"batch {done}/{total}", flush=True)
store.index(chunks, progress=progress)
print("finished", flush=True)
"""


def test_a_killed_index_run_is_completed_by_the_next_one(tmp_path: Path, retrieval_roots, offline_env):
    """Kill (SIGKILL) indexing after three batches; the next run embeds only what is missing.
    The child runs on a 'clean machine' with every download blocked, so this also shows the
    store builds offline."""
    from kforge.retrieval.corpus import corpus_chunks, load_documents

    path = tmp_path / "s"
    child = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT, str(path), *map(str, retrieval_roots)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=offline_env,
    )
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith("batch 12/"):
            child.send_signal(signal.SIGKILL)
            break
    child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr.read() if child.stderr else ""
    chunks = [c for c in corpus_chunks(load_documents(*retrieval_roots)) if c.kind == "hardware"]
    store = Store(path)
    stored = store.count()
    assert 12 <= stored < len(chunks), store.notices
    report = store.index(chunks)
    assert report.embedded == len(chunks) - stored and store.embedder.texts_embedded == report.embedded
    assert report.total == len(chunks)


def test_the_store_persists_across_processes(retrieval_store, offline_env):
    query = "warp shuffle reduction"
    here = [h.id for h in retrieval_store.search(query, k=3)]
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from kforge.agent.cli import main; main()",
            "search",
            query,
            "-k",
            "3",
            "--json",
            "--store",
            str(retrieval_store.path),
        ],
        capture_output=True,
        text=True,
        env=offline_env,
        timeout=120,
        check=True,
    )
    there = json.loads(out.stdout)
    assert [h["id"] for h in there] == here
    assert set(there[0]) == {"id", "kind", "score", "text", "metadata"}
    assert there[0]["kind"] in KINDS
