"""Errors raised by retrieval. Each message is one line that says what to do."""

from __future__ import annotations


class RetrievalError(RuntimeError):
    """Base class for retrieval failures."""


class MissingDependency(RetrievalError):
    """chromadb, sentence-transformers or the bundled model is not installed."""


class ModelError(RetrievalError):
    """The embedding model folder cannot be loaded."""


class CorpusError(RetrievalError):
    """A corpus file is malformed (bad JSON, a catalog entry without its file)."""
