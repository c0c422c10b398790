"""The shipped corpus: hardware sheets from gpus.json, guides, and kernel documents."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from kforge.retrieval.chunking import Document, chunk_document, split_sections
from kforge.retrieval.corpus import corpus_chunks, default_roots, gpu_table, kernel_documents, load_documents
from kforge.retrieval.errors import CorpusError
from kforge.tools.hardware import spec_for, spec_table

GPUS = ("A100-SXM", "H100-SXM", "H100-PCIe", "H200", "L40S", "RTX-4090", "B200")
TOPICS = (
    "coalescing",
    "shared-memory-tiling",
    "occupancy",
    "warp-reductions",
    "tensor-core-matmul",
    "async-copy-pipelining",
    "fusion",
    "cuda-graphs",
    "triton-tuning",
    "numerics",
    "evaluator-cheats",
)


@pytest.fixture(scope="module")
def shipped() -> list:
    return corpus_chunks(load_documents())


def test_every_gpu_has_a_sheet_with_its_numbers_and_notes(shipped):
    ids = {c.id for c in shipped}
    assert set(GPUS) <= set(spec_table())
    by_id = {c.id: c for c in shipped}
    for gpu in GPUS:
        for section in ("overview", "memory", "compute-peaks", "features-for-kernel-writers"):
            assert f"hardware/{gpu}#{section}" in ids
        assert any(
            c.id.startswith(f"hardware/{gpu}#") and c.metadata["source"] == f"hardware/{gpu}.md"
            for c in shipped
        )
        spec = spec_for(gpu)  # the roofline's view of the same file
        assert f"{spec.sms} SMs" in by_id[f"hardware/{gpu}#overview"].text
        assert f"{spec.peak_gbps:g} GB/s" in by_id[f"hardware/{gpu}#memory"].text
        peaks = by_id[f"hardware/{gpu}#compute-peaks"].text
        assert f"| fp32 | {spec.tflops['fp32']:g} |" in peaks
        meta = by_id[f"hardware/{gpu}#memory"].metadata
        assert (meta["gpu"], meta["arch"], meta["kind"]) == (gpu, spec.arch, "hardware")


def test_hardware_notes_do_not_repeat_the_numbers():
    corpus_root, _ = default_roots()
    for gpu, spec in gpu_table(corpus_root).items():
        notes = (corpus_root / "hardware" / f"{gpu}.md").read_text()
        figures = {
            spec["sms"],
            spec["boost_clock_mhz"],
            spec["memory_bandwidth_gbps"],
            spec["l2_mb"],
            spec["smem_per_sm_kb"],
            spec["memory_gb"],
            *spec["tflops"].values(),
        }
        numbers = {float(n) for n in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", notes)}
        assert not numbers & {float(f) for f in figures if f >= 10}, (
            f"{gpu}.md repeats figures from gpus.json"
        )


def test_every_guide_exists_with_sections_and_a_sane_length():
    corpus_root, _ = default_roots()
    for topic in TOPICS:
        text = (corpus_root / "guides" / f"{topic}.md").read_text()
        assert 60 <= len(text.splitlines()) <= 200, topic
        assert len(split_sections(text)) >= 5, topic


def test_chunk_ids_and_hashes_are_stable(shipped):
    again = corpus_chunks(load_documents())
    assert [(c.id, c.content_hash) for c in again] == [(c.id, c.content_hash) for c in shipped]
    assert len({c.id for c in shipped}) == len(shipped)
    for c in shipped:
        assert c.metadata["kind"] in ("hardware", "guide", "kernel") and c.metadata["source"]


def test_the_shipped_catalog_becomes_kernel_documents(shipped):
    _, examples_root = default_roots()
    if not (examples_root / "catalog.json").is_file():
        pytest.skip("examples/catalog.json is not written yet")
    catalog = json.loads((examples_root / "catalog.json").read_text())
    files = [cand["file"] for entry in catalog for cand in entry["candidates"]]
    kernels = {c.id: c for c in shipped if c.kind == "kernel"}
    assert len(kernels) == len(files) >= 20
    for file in files:
        chunk = kernels["kernel/" + Path(file).stem]
        assert chunk.metadata["backend"] in ("cuda", "triton", "cupy") and chunk.metadata["op"]
        assert (examples_root / file).read_text().rstrip() in chunk.text


def test_kernel_documents_without_measurements(retrieval_roots, tmp_path: Path):
    corpus_root, examples_root = retrieval_roots
    bare = tmp_path / "corpus"
    shutil.copytree(corpus_root / "hardware", bare / "hardware")
    docs = kernel_documents(bare, examples_root)
    assert len(docs) == 4 and all("speedup" not in d.metadata for d in docs)
    assert all("Not measured yet." in d.text for d in docs)


def test_a_catalog_naming_a_missing_file_is_a_corpus_error(retrieval_roots, tmp_path: Path):
    corpus_root, examples_root = retrieval_roots
    broken = tmp_path / "examples"
    shutil.copytree(examples_root, broken)
    (broken / "candidates" / "softmax_cuda.py").unlink()
    with pytest.raises(CorpusError, match="softmax_cuda.py"):
        kernel_documents(corpus_root, broken)


def test_markdown_is_split_at_sections_not_inside_code():
    text = "# T\n\nintro\n\n## One\n\n```python\n## not a heading\n```\n\n## Two\n\n" + "para\n\n" * 3
    doc = Document("guide/t", "guide", "T", text, {"source": "guides/t.md"})
    chunks = chunk_document(doc)
    assert [c.id for c in chunks] == ["guide/t#overview", "guide/t#one", "guide/t#two"]
    assert "## not a heading" in chunks[1].text and chunks[1].text.startswith("# T: One")
    long = chunk_document(
        Document(
            "guide/l",
            "guide",
            "L",
            "## Big\n\n" + "word " * 300 + "\n\n" + "more " * 300,
            {"source": "guides/l.md"},
        ),
        limit=1000,
    )
    assert [c.id for c in long] == ["guide/l#big", "guide/l#big-2"]
