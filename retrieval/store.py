"""The vector store: one chromadb collection per kind of document, under the user's cache.

Indexing is incremental and kill-safe: each chunk is stored with a hash of its content,
chunks whose stored hash matches are skipped, changed ones are re-embedded, and chunks
that left the corpus are deleted. Work is written in batches, so a run that is killed
leaves every finished batch in place and the next run completes the rest.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .chunking import Chunk, metadata_for_store
from .embed import INSTALL_HINT, Embedder, chroma_embedding_function
from .errors import MissingDependency
from .hits import Hit
from .rerank import combined_score, terms

log = logging.getLogger(__name__)

KINDS = ("hardware", "guide", "kernel")
BATCH_SIZE = 32
POOL_FACTOR, MIN_POOL = 4, 20  # nearest chunks per kind that the keyword re-ranking sees
Progress = Callable[[int, int], None]  # (chunks embedded so far, chunks to embed)


def default_store_path() -> Path:
    """``$KFORGE_CACHE/store``, else ``~/.cache/kforge/store``."""
    cache = os.environ.get("KFORGE_CACHE") or Path.home() / ".cache" / "kforge"
    return Path(cache) / "store"


@dataclasses.dataclass
class IndexReport:
    total: int  # chunks in the store after indexing
    embedded: int  # chunks embedded by this run (new or changed)
    unchanged: int
    deleted: int
    seconds: float


def _chroma() -> Any:
    try:
        import chromadb
    except ModuleNotFoundError as err:
        raise MissingDependency(f"retrieval needs chromadb: {INSTALL_HINT}") from err
    return chromadb


class Store:
    """A persistent store at ``path``: ``path/chroma`` holds chromadb's files and
    ``path/added_kernels.jsonl`` the kernels added from runs (replayed on a rebuild)."""

    def __init__(self, path: Path | None = None, embedder: Embedder | None = None) -> None:
        self.path = Path(path) if path else default_store_path()
        self.embedder = embedder or Embedder()
        self.notices: list[str] = []  # one-line messages for the user (recovery, rebuilds)
        self._collections: dict[str, Any] = {}
        self._open()

    @property
    def chroma_dir(self) -> Path:
        return self.path / "chroma"

    @property
    def added_kernels_file(self) -> Path:
        return self.path / "added_kernels.jsonl"

    # -- opening, recovering, rebuilding -------------------------------------------------

    def _open(self) -> None:
        chromadb = _chroma()
        from chromadb.errors import ChromaError

        if not self.chroma_dir.exists():
            self._notice(f"no store at {self.chroma_dir}: it will be built from the corpus")
        try:
            self._connect()
        except (ChromaError, sqlite3.DatabaseError, OSError) as err:
            first_line = (str(err).splitlines() or [type(err).__name__])[0]
            aside = self.chroma_dir.with_name(f"chroma.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
            self._notice(
                f"the store at {self.chroma_dir} is unreadable ({first_line}); moved it to {aside.name} and rebuilding"
            )
            self._close(chromadb)
            shutil.move(str(self.chroma_dir), str(aside))
            self._connect()

    def _connect(self) -> None:
        chromadb = _chroma()
        from chromadb.config import Settings

        self.chroma_dir.mkdir(parents=True, exist_ok=True)
        client = chromadb.PersistentClient(
            path=str(self.chroma_dir), settings=Settings(anonymized_telemetry=False, allow_reset=True)
        )
        self._client = client
        self._collections = {kind: self._collection(kind) for kind in KINDS}
        for collection in self._collections.values():
            collection.count()
            collection.peek(1)

    def _collection(self, kind: str) -> Any:
        function = chroma_embedding_function(self.embedder)
        model = self.embedder.model_id
        collection = self._client.get_or_create_collection(
            kind,
            embedding_function=function,
            metadata={"embedding_model": model},
            configuration={"hnsw": {"space": "cosine"}},
        )
        stored = (collection.metadata or {}).get("embedding_model")
        if stored != model:
            self._notice(f"the {kind} collection was embedded with {stored}; re-embedding it with {model}")
            self._client.delete_collection(kind)
            collection = self._client.create_collection(
                kind,
                embedding_function=function,
                metadata={"embedding_model": model},
                configuration={"hnsw": {"space": "cosine"}},
            )
        return collection

    def _close(self, chromadb: Any) -> None:
        self._collections = {}
        chromadb.api.client.SharedSystemClient.clear_system_cache()

    def rebuild(self) -> None:
        """Drop every embedded chunk (added kernels stay in their file and are re-indexed)."""
        self._notice(f"rebuilding the store at {self.chroma_dir}")
        self._close(_chroma())
        shutil.rmtree(self.chroma_dir, ignore_errors=True)
        self._connect()

    def _notice(self, message: str) -> None:
        log.info(message)
        self.notices.append(message)

    # -- indexing ------------------------------------------------------------------------

    def count(self, kind: str | None = None) -> int:
        kinds = [kind] if kind else list(KINDS)
        return sum(int(self._collections[k].count()) for k in kinds)

    def stored_hashes(self, kind: str) -> dict[str, tuple[str, str]]:
        """id -> (content hash, origin) of every chunk of ``kind`` in the store."""
        got = self._collections[kind].get(include=["metadatas"])
        return {
            id_: (str(meta.get("content_hash", "")), str(meta.get("origin", "corpus")))
            for id_, meta in zip(got["ids"], got["metadatas"] or [], strict=True)
        }

    def index(self, chunks: Iterable[Chunk], progress: Progress | None = None) -> IndexReport:
        """Make the store hold exactly ``chunks`` plus the added kernels, embedding only what changed."""
        start = time.perf_counter()
        wanted: dict[str, list[Chunk]] = {kind: [] for kind in KINDS}
        for chunk in [*chunks, *self.added_chunks()]:
            wanted[chunk.kind].append(chunk)
        todo: list[Chunk] = []
        unchanged = deleted = 0
        for kind, kind_chunks in wanted.items():
            stored = self.stored_hashes(kind)
            ids = {c.id for c in kind_chunks}
            gone = [id_ for id_, (_, origin) in stored.items() if id_ not in ids and origin == "corpus"]
            if gone:
                self._collections[kind].delete(ids=gone)
                deleted += len(gone)
            fresh = [c for c in kind_chunks if stored.get(c.id, ("", ""))[0] != c.content_hash]
            unchanged += len(kind_chunks) - len(fresh)
            todo.extend(fresh)
        if progress:
            progress(0, len(todo))
        for done in range(0, len(todo), BATCH_SIZE):
            batch = todo[done : done + BATCH_SIZE]
            self._upsert(batch)
            if progress:
                progress(done + len(batch), len(todo))
        return IndexReport(self.count(), len(todo), unchanged, deleted, time.perf_counter() - start)

    def index_chunks(self, chunks: list[Chunk]) -> None:
        """Embed and store ``chunks`` as they are, deleting nothing."""
        for done in range(0, len(chunks), BATCH_SIZE):
            self._upsert(chunks[done : done + BATCH_SIZE])

    def add_kernel(self, source: str, result: Any, **details: Any) -> tuple[str, bool]:
        """See :func:`kforge.retrieval.added.add_kernel`."""
        from .added import add_kernel

        return add_kernel(self, source, result, **details)

    def _upsert(self, batch: list[Chunk]) -> None:
        vectors = self.embedder.embed([c.text for c in batch])
        by_kind: dict[str, list[int]] = {}
        for i, chunk in enumerate(batch):
            by_kind.setdefault(chunk.kind, []).append(i)
        for kind, rows in by_kind.items():
            self._collections[kind].upsert(
                ids=[batch[i].id for i in rows],
                documents=[batch[i].text for i in rows],
                embeddings=[vectors[i] for i in rows],
                metadatas=[metadata_for_store(batch[i]) for i in rows],
            )

    def added_chunks(self) -> list[Chunk]:
        from .added import read_added

        return read_added(self.added_kernels_file)

    # -- reading -------------------------------------------------------------------------

    def search(
        self, query: str, k: int = 5, kinds: Iterable[str] = KINDS, where: dict[str, Any] | None = None
    ) -> list[Hit]:
        """The ``k`` chunks nearest to ``query`` over ``kinds``, best first: a pool of nearest
        chunks by cosine similarity, re-ranked with a keyword bonus (see ``rerank``)."""
        vector = self.embedder.embed([query])[0]
        query_terms = terms(query)
        hits: list[Hit] = []
        for kind in kinds:
            collection = self._collections[kind]
            n = min(max(POOL_FACTOR * k, MIN_POOL), int(collection.count()))
            if n == 0:
                continue
            got = collection.query(query_embeddings=[vector], n_results=n, where=where or None)
            for id_, text, meta, dist in zip(
                got["ids"][0], got["documents"][0], got["metadatas"][0], got["distances"][0], strict=True
            ):
                score = combined_score(1.0 - float(dist), query_terms, text)
                hits.append(Hit(id_, kind, score, text, _public(meta)))
        hits.sort(key=lambda h: h.score, reverse=True)
        return hits[:k]

    def get(self, kind: str, where: dict[str, Any] | None = None, ids: list[str] | None = None) -> list[Hit]:
        """Chunks of ``kind`` by id or filter, in id order, with score 1.0."""
        got = self._collections[kind].get(ids=ids, where=where or None, include=["documents", "metadatas"])
        hits = [
            Hit(id_, kind, 1.0, text, _public(meta))
            for id_, text, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
        ]
        return sorted(hits, key=lambda h: h.id)


def _public(meta: dict[str, Any] | None) -> dict[str, Any]:
    """Metadata without the store's bookkeeping."""
    return {k: v for k, v in (meta or {}).items() if k != "content_hash"}
