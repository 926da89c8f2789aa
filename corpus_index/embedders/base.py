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


@runtime_checkable
class LearnsDim(Protocol):
    """An embedder whose ``dim`` may be learned from its server's first answer (the dimension
    probe) rather than known up front; a learned one can be forgotten, to be learned again."""

    @property
    def dim_learned(self) -> bool:
        """Whether ``dim`` comes from the server's answers (neither configured nor known)."""
        ...

    def forget_dim(self) -> None:
        """Forget a learned ``dim`` (and ``normalized``), so the next read of it probes again."""
        ...
