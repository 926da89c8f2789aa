"""The optional rerank stage: one interface, and a sentence-transformers cross-encoder behind it.

No reranker is configured by default. A cross-encoder is used only when the user points at a
local model folder (``--rerank-model PATH`` or ``CrossEncoderReranker(path)``); nothing is
downloaded. A reranker only reorders candidates that already passed the eligibility prefilter,
so it can never add a row the principal may not see.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from corpus_index.errors import ConfigError


@runtime_checkable
class Reranker(Protocol):
    """Scores (query, passage) pairs; a higher score is more relevant."""

    name: str

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """One score per text, in the order given."""
        ...


class CrossEncoderReranker:
    """A sentence-transformers ``CrossEncoder`` loaded from a local folder, on CPU."""

    def __init__(self, path: str | os.PathLike[str], *, batch_size: int = 32) -> None:
        """
        Raises:
            ConfigError: ``path`` is not a folder holding a model.
        """
        folder = Path(path).expanduser()
        if not folder.is_dir() or not (folder / "config.json").is_file():
            raise ConfigError(
                f"rerank model {str(path)!r} is not a local model folder (it needs a config.json); "
                "point at a downloaded cross-encoder, e.g. a copy of cross-encoder/ms-marco-MiniLM-L-6-v2"
            )
        self.path = str(folder.resolve())
        self.name = f"cross-encoder:{folder.name}"
        self.batch_size = batch_size

    @property
    def model(self) -> Any:
        return _load_cross_encoder(self.path)

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        scores = self.model.predict(
            [(query, t) for t in texts], batch_size=self.batch_size, show_progress_bar=False
        )
        return [float(s) for s in scores]


@functools.lru_cache(maxsize=2)
def _load_cross_encoder(path: str) -> Any:
    try:
        from sentence_transformers import CrossEncoder
    except ImportError:
        raise ConfigError(
            "reranking with a cross-encoder needs sentence-transformers: "
            "pip install 'corpus-index[local-model]'"
        ) from None
    from corpus_index.embedders.local import log, quiet_weight_loading

    quiet_weight_loading()
    log.info("loading model %s", path)
    return CrossEncoder(path, device="cpu")


def make_reranker(spec: str | None) -> Reranker | None:
    """The reranker ``spec`` names: ``None``/``''`` for none, else a cross-encoder folder
    (optionally prefixed ``cross-encoder:``).

    Raises:
        ConfigError: the folder does not hold a model.
    """
    if not spec:
        return None
    path = spec.removeprefix("cross-encoder:")
    return CrossEncoderReranker(path)
