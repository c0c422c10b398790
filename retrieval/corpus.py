"""Enumerate the documents to index: hardware sheets, guides and prior kernels.

By default they come from the installed packages ``kforge.corpus`` and ``kforge.examples``;
tests pass their own folders.
"""

from __future__ import annotations

import json
import logging
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from .chunking import Chunk, Document, chunk_document
from .errors import CorpusError
from .kernels import catalog_records, kernel_document
from .sheets import hardware_documents

log = logging.getLogger(__name__)


def default_roots() -> tuple[Traversable, Traversable]:
    return resources.files("kforge.corpus"), resources.files("kforge.examples")


def _read_json(path: Traversable, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CorpusError(f"{what} is not valid JSON: {err}") from err


def guide_documents(corpus_root: Traversable) -> list[Document]:
    folder = corpus_root / "guides"
    if not folder.is_dir():
        return []
    docs = []
    for path in sorted(folder.iterdir(), key=lambda p: p.name):
        if not path.name.endswith(".md"):
            continue
        topic = path.name.removesuffix(".md")
        text = path.read_text()
        title = next((ln[2:].strip() for ln in text.splitlines() if ln.startswith("# ")), topic)
        meta: dict[str, str | int | float | bool] = {"topic": topic, "source": f"guides/{path.name}"}
        docs.append(Document(f"guide/{topic}", "guide", title, text, meta))
    return docs


def gpu_table(corpus_root: Traversable) -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = _read_json(corpus_root / "hardware" / "gpus.json", "gpus.json")["gpus"]
    return table


def sheet_documents(corpus_root: Traversable) -> list[Document]:
    table = gpu_table(corpus_root)
    folder = corpus_root / "hardware"
    notes = {name: (folder / f"{name}.md").read_text() for name in table if (folder / f"{name}.md").is_file()}
    return hardware_documents(table, notes)


def measured_results(corpus_root: Traversable) -> dict[str, Any]:
    """``corpus/kernels/measured.json``, or an empty result set when it is absent."""
    path = corpus_root / "kernels" / "measured.json"
    if not path.is_file():
        log.info("no kernels/measured.json: prior kernels are indexed without their timings")
        return {}
    data: dict[str, Any] = _read_json(path, "kernels/measured.json")
    return data


def kernel_documents(corpus_root: Traversable, examples_root: Traversable) -> list[Document]:
    catalog_path = examples_root / "catalog.json"
    if not catalog_path.is_file():
        log.info("no examples/catalog.json: no prior kernels to index")
        return []
    catalog: list[dict[str, Any]] = _read_json(catalog_path, "examples/catalog.json")
    sources: dict[str, str] = {}
    for entry in catalog:
        for cand in entry.get("candidates", []):
            path = examples_root / cand["file"]
            if not path.is_file():
                raise CorpusError(f"examples/catalog.json names {cand['file']}, which does not exist")
            sources[cand["file"]] = path.read_text()
    arch_of = {name: spec["arch"] for name, spec in gpu_table(corpus_root).items()}
    records = catalog_records(catalog, sources, measured_results(corpus_root), arch_of)
    return [kernel_document(r, f"kernel/{r.name}", origin="corpus") for r in records]


def load_documents(
    corpus_root: Traversable | None = None, examples_root: Traversable | None = None
) -> list[Document]:
    default_corpus, default_examples = default_roots()
    corpus_root = corpus_root or default_corpus
    examples_root = examples_root or default_examples
    return (
        sheet_documents(corpus_root)
        + guide_documents(corpus_root)
        + kernel_documents(corpus_root, examples_root)
    )


def corpus_chunks(documents: list[Document]) -> list[Chunk]:
    """All chunks of ``documents``; two chunks with one id is a corpus error."""
    chunks: list[Chunk] = []
    seen: dict[str, str] = {}
    for doc in documents:
        for chunk in chunk_document(doc):
            if chunk.id in seen:
                raise CorpusError(
                    f"two chunks have the id {chunk.id} ({seen[chunk.id]} and {doc.metadata['source']})"
                )
            seen[chunk.id] = str(doc.metadata["source"])
            chunks.append(chunk)
    return chunks
