"""Retrieval: a vector store of hardware sheets, optimization guides and prior kernels.

chromadb and sentence-transformers are imported only when a store is opened, so the agent
runs without retrieval when they are not installed (opening raises ``MissingDependency``).
"""

from .api import gpu_filter, resolve_gpu, retrieve_for_task
from .embed import Embedder
from .errors import CorpusError, MissingDependency, ModelError, RetrievalError
from .hits import Hit
from .store import IndexReport, Store, default_store_path

__all__ = [
    "CorpusError",
    "Embedder",
    "Hit",
    "IndexReport",
    "MissingDependency",
    "ModelError",
    "RetrievalError",
    "Store",
    "default_store_path",
    "gpu_filter",
    "resolve_gpu",
    "retrieve_for_task",
]
