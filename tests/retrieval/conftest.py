"""Retrieval fixtures: one corpus and one embedded store per test session."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

RETRIEVAL_FIXTURES = Path(__file__).parent.parent / "fixtures" / "retrieval"


@pytest.fixture(scope="session")
def retrieval_roots(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(corpus root, examples root): the shipped guides and hardware sheets with the fixture
    measured.json, and the fixture catalog of prior kernels."""
    pytest.importorskip("chromadb")
    import kforge.corpus

    corpus = tmp_path_factory.mktemp("corpus")
    shipped = Path(kforge.corpus.__file__).parent
    for sub in ("hardware", "guides"):
        shutil.copytree(shipped / sub, corpus / sub)
    (corpus / "kernels").mkdir()
    shutil.copy(RETRIEVAL_FIXTURES / "measured.json", corpus / "kernels" / "measured.json")
    return corpus, RETRIEVAL_FIXTURES / "examples"


@pytest.fixture(scope="session")
def retrieval_chunks(retrieval_roots: tuple[Path, Path]) -> list:
    from kforge.retrieval.corpus import corpus_chunks, load_documents

    return corpus_chunks(load_documents(*retrieval_roots))


@pytest.fixture(scope="session")
def retrieval_store(tmp_path_factory: pytest.TempPathFactory, retrieval_chunks: list):
    """A store with the whole test corpus embedded once per session. Do not modify it."""
    from kforge.retrieval import Store

    store = Store(tmp_path_factory.mktemp("store"))
    store.index(retrieval_chunks)
    return store


@pytest.fixture
def offline_env(tmp_path: Path) -> dict[str, str]:
    """Environment for a subprocess on a 'clean machine': empty home and caches, and every
    HTTP(S) request sent to a closed port, so any download attempt fails."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    home = tmp_path / "home"
    home.mkdir()
    env.update(
        HOME=str(home),
        HF_HOME=str(home / "hf"),
        XDG_CACHE_HOME=str(home / ".cache"),
        KFORGE_CACHE=str(home / ".cache" / "kforge"),
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
        NO_PROXY="",
        PYTHONWARNINGS="ignore",
    )
    return env
