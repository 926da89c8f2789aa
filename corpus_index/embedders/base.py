"""The embedder interface every backend implements, and the counters it keeps.

The backends import this module, not the package: the package's ``make_embedder`` imports
the backends, so the interface lives below both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt


@dataclass(slots=True)
class EmbedStats:
    """Counters an embedder accumulates: calls, inputs, tokens and cost."""

    calls: int = 0
    inputs: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    retries: int = 0


@runtime_checkable
class Embedder(Protocol):
    """What the pipeline needs from an embedding backend."""

    backend_spec: str
    dim: int
    normalized: bool
    revision: str
    stats: EmbedStats

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Vectors for ``texts``, shape ``(len(texts), dim)``, float32."""
        ...
