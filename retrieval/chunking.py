"""Documents and the chunks they are split into.

A markdown document is split at its ``## `` headings; each section becomes one chunk
with a stable id ``<doc id>#<section slug>`` (``guide/coalescing#vector-loads``). A section
longer than ``MAX_CHUNK_CHARS`` is split at paragraph boundaries into ``#slug``,
``#slug-2``, ... Each chunk carries a hash of its text and metadata, so indexing can skip
chunks that have not changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any

MAX_CHUNK_CHARS = 2400
MetaValue = str | int | float | bool


@dataclasses.dataclass(frozen=True)
class Document:
    """One source document: a hardware sheet, a guide or a prior kernel."""

    id: str  # "guide/coalescing", "hardware/H100-SXM", "kernel/softmax_triton"
    kind: str  # "hardware", "guide" or "kernel"
    title: str
    text: str  # markdown; split at "## " headings unless ``whole``
    metadata: dict[str, MetaValue]
    whole: bool = False  # kernels are one chunk: the source must not be cut


@dataclasses.dataclass(frozen=True)
class Chunk:
    id: str
    kind: str
    text: str
    metadata: dict[str, MetaValue]

    @property
    def content_hash(self) -> str:
        payload = json.dumps([self.text, self.metadata], sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def slugify(title: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return slug or "section"


def split_sections(markdown: str) -> list[tuple[str, str]]:
    """(heading, body) pairs for each ``## `` section; text before the first one is the
    ``overview`` section. The ``# `` title line is dropped."""
    sections: list[tuple[str, list[str]]] = [("Overview", [])]
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if not in_code and line.startswith("## "):
            sections.append((line[3:].strip(), []))
        elif not in_code and line.startswith("# ") and not sections[-1][1]:
            continue
        else:
            sections[-1][1].append(line)
    return [(title, "\n".join(body).strip()) for title, body in sections if "\n".join(body).strip()]


def _split_long(body: str, limit: int) -> list[str]:
    """Paragraph-aligned pieces of at most ``limit`` characters (a lone longer paragraph stays whole)."""
    pieces: list[str] = []
    current = ""
    for paragraph in re.split(r"\n\s*\n", body):
        if current and len(current) + len(paragraph) + 2 > limit:
            pieces.append(current)
            current = paragraph
        else:
            current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        pieces.append(current)
    return pieces


def chunk_document(doc: Document, limit: int = MAX_CHUNK_CHARS) -> list[Chunk]:
    """The chunks of ``doc``; each chunk's text starts with the document and section titles."""
    base = {**doc.metadata, "kind": doc.kind, "doc_id": doc.id}
    if doc.whole:
        return [Chunk(doc.id, doc.kind, f"# {doc.title}\n\n{doc.text.strip()}", {**base, "section": ""})]
    chunks: list[Chunk] = []
    seen: set[str] = set()
    for title, body in split_sections(doc.text):
        slug = slugify(title)
        while slug in seen:
            slug += "-x"
        seen.add(slug)
        for n, piece in enumerate(_split_long(body, limit), start=1):
            chunk_id = f"{doc.id}#{slug}" if n == 1 else f"{doc.id}#{slug}-{n}"
            text = f"# {doc.title}: {title}\n\n{piece}"
            chunks.append(Chunk(chunk_id, doc.kind, text, {**base, "section": title}))
    return chunks


def metadata_for_store(chunk: Chunk) -> dict[str, Any]:
    """Chunk metadata plus what the store needs to index incrementally."""
    return {**chunk.metadata, "content_hash": chunk.content_hash}
