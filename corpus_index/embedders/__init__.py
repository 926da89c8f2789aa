"""Embedders: one interface, three backends (``st:``, ``openai:``, ``hash:``).

Every embedder has a ``backend_spec`` (what produced the vectors), a ``dim``, whether its
vectors are L2-``normalized``, a ``revision`` (weights or algorithm version) and
``embed(texts) -> float32[n, dim]``. Vectors from different backend_specs are never compared.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from corpus_index.backend_specs import HASH_SPEC, ST_MODELS, validate_backend_spec
from corpus_index.embedders.base import Embedder, EmbedStats
from corpus_index.embedders.hashing import HashEmbedder
from corpus_index.embedders.local import SentenceTransformerEmbedder
from corpus_index.embedders.openai_backend import OpenAIEmbedder
from corpus_index.errors import ConfigError

__all__ = ["ST_MODELS", "EmbedStats", "Embedder", "make_embedder", "validate_backend_spec"]


def make_embedder(
    backend_spec: str,
    *,
    base_url: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    dimensions: int | None = None,
    batch_size: int = 64,
    max_batch_tokens: int = 8000,
    price_per_million_tokens: float | None = None,
    environ: Mapping[str, str] | None = None,
    weights_digests: Path | None = None,
) -> Embedder:
    """Build the embedder a profile names.

    ``weights_digests`` is where a local model's weights digest is remembered (the home's
    ``model-digests.json``); without it the weights are hashed each time.

    Raises:
        ConfigError: the backend_spec is malformed or the backend lacks what it needs.
    """
    problem = validate_backend_spec(backend_spec)
    if problem:
        raise ConfigError(problem)
    if m := HASH_SPEC.match(backend_spec):
        return HashEmbedder(int(m.group(1)))
    if backend_spec.startswith("st:"):
        return SentenceTransformerEmbedder(
            backend_spec[3:], batch_size=batch_size, weights_digests=weights_digests
        )
    env = os.environ if environ is None else environ
    api_key = env.get(api_key_env)
    if not api_key:
        raise ConfigError(
            f"{backend_spec}: set the API key in the environment variable {api_key_env}"
        )
    return OpenAIEmbedder(
        backend_spec[7:],
        base_url=base_url,
        api_key=api_key,
        api_key_env=api_key_env,
        dimensions=dimensions,
        batch_size=batch_size,
        max_batch_tokens=max_batch_tokens,
        price_per_million_tokens=price_per_million_tokens,
    )
