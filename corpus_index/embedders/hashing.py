"""``hash:v1-<dim>``: deterministic feature hashing. For tests and machines with no model.

Not semantic: two texts are close only when they share words. Never the default for users.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from corpus_index.embedders.base import EmbedStats

_TOKEN = re.compile(r"\w+", re.UNICODE)


class HashEmbedder:
    """Signed feature hashing of lowercase word unigrams and bigrams, L2-normalized."""

    normalized = True
    revision = "v1"

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.backend_spec = f"hash:v1-{dim}"
        self.stats = EmbedStats()

    def _vector(self, text: str) -> npt.NDArray[np.float32]:
        vec = np.zeros(self.dim, dtype=np.float32)
        tokens = _TOKEN.findall(text.lower())
        features = tokens + [f"{a} {b}" for a, b in zip(tokens, tokens[1:], strict=False)]
        for feature in features:
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            index = int.from_bytes(digest[:4], "little") % self.dim
            sign = 1.0 if digest[4] & 1 else -1.0
            vec[index] += sign
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            vec[0] = 1.0  # empty text still gets a valid unit vector
            return vec
        return vec / norm

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.stats.calls += 1
        self.stats.inputs += len(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._vector(t) for t in texts]).astype(np.float32, copy=False)
