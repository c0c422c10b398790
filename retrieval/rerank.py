"""Keyword re-ranking of the nearest chunks.

A small sentence embedding model blurs exact identifiers (``setmaxnreg``, ``num_stages``,
``__shfl_xor_sync``) that kernel writers search for. The store takes a pool of nearest
chunks by cosine similarity and re-orders them by

    score = cosine + KEYWORD_WEIGHT * (fraction of the query's terms found in the chunk)
"""

from __future__ import annotations

import re

KEYWORD_WEIGHT = 0.3
_TOKEN = re.compile(r"[a-z0-9_]+(?:\.[a-z0-9_]+)*")
_SUFFIXES = ("ing", "es", "ed", "s")
_STOPWORDS = frozenset(
    "the and for with what how does are was were this that from into its has have not use used using "
    "can when which per all any one two does don why who than then them they you your our out too "
    "much many more most about".split()
)


def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def terms(text: str) -> set[str]:
    """Lower-cased, lightly stemmed words of ``text`` without stop words and 1-2 letter words
    (unless they contain a digit: ``l2``, ``h100``)."""
    words = _TOKEN.findall(text.lower())
    return {_stem(w) for w in words if w not in _STOPWORDS and (len(w) >= 3 or any(ch.isdigit() for ch in w))}


def keyword_overlap(query_terms: set[str], text: str) -> float:
    """Fraction of ``query_terms`` that occur in ``text`` (0.0 for an empty query)."""
    if not query_terms:
        return 0.0
    return len(query_terms & terms(text)) / len(query_terms)


def combined_score(cosine: float, query_terms: set[str], text: str) -> float:
    return cosine + KEYWORD_WEIGHT * keyword_overlap(query_terms, text)
