"""What a search returns. The agent turns a Hit into its own ``Doc`` for prompts."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Hit:
    id: str  # stable chunk id, cited in prompts: "guide/coalescing#vector-loads"
    kind: str  # "hardware", "guide" or "kernel"
    score: float  # cosine similarity plus keyword bonus (see rerank); 1.0 when fetched by id or filter
    text: str
    metadata: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
