"""The ``serve`` section of ``corpus.yaml``: where the HTTP API's key hashes live, and its limits.

API keys are never written in the configuration: it names a file (relative to ``corpus.yaml``)
or an environment variable that holds the keys' sha256 hashes with the principal of each.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corpus_index.errors import ConfigError

SERVE_KEYS = {
    "api_keys_file",
    "api_keys_env",
    "cursor_secret_env",
    "max_k",
    "max_query_chars",
    "max_filter_conditions",
    "max_filter_bytes",
    "max_body_bytes",
    "max_concurrent_embeddings",
    "embedding_wait_s",
    "open_metrics",
}
DEFAULT_EMBEDDING_WAIT_S = 10.0


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """How ``corpus serve`` authenticates requests and bounds them."""

    api_keys_file: Path | None = None
    api_keys_env: str | None = None
    # the environment variable holding the secret that signs paging cursors (default: a
    # random secret per process, so cursors do not outlive a restart)
    cursor_secret_env: str | None = None
    max_k: int = 100
    max_query_chars: int = 2000
    max_filter_conditions: int = 32
    max_filter_bytes: int = 8192
    # a request body longer than this is refused (413) before any of it is parsed: a query
    # vector of a few thousand dimensions is about 80 KB of JSON
    max_body_bytes: int = 1 << 20
    max_concurrent_embeddings: int = 4
    embedding_wait_s: float = DEFAULT_EMBEDDING_WAIT_S
    # /metrics answers without a key (a port only the scraper's network reaches); by default
    # it asks for a key whose scopes hold ``metrics``
    open_metrics: bool = False


def parse_serve(raw: Any, *, path: Path) -> ServeConfig:
    """Validate the ``serve`` mapping of ``corpus.yaml`` (absent: no keys, so every request is 401).

    Raises:
        ConfigError: an unknown key, a value of the wrong type, or both or neither key source.
    """
    if raw is None:
        return ServeConfig()
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: serve: expected a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - SERVE_KEYS)
    if unknown:
        raise ConfigError(
            f"{path}: serve: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(SERVE_KEYS))})"
        )
    if "api_keys_file" in raw and "api_keys_env" in raw:
        raise ConfigError(f"{path}: serve: give api_keys_file or api_keys_env, not both")
    file = raw.get("api_keys_file")
    if file is not None and (not isinstance(file, str) or not file):
        raise ConfigError(f"{path}: serve.api_keys_file: expected a file name")
    numbers: dict[str, Any] = {}
    for key in (
        "max_k",
        "max_query_chars",
        "max_filter_conditions",
        "max_filter_bytes",
        "max_body_bytes",
    ):
        numbers[key] = _positive_int(raw, key, path)
    numbers["max_concurrent_embeddings"] = _positive_int(raw, "max_concurrent_embeddings", path)
    wait = raw.get("embedding_wait_s", DEFAULT_EMBEDDING_WAIT_S)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or wait <= 0:
        raise ConfigError(f"{path}: serve.embedding_wait_s: expected a positive number of seconds")
    open_metrics = raw.get("open_metrics", False)
    if not isinstance(open_metrics, bool):
        raise ConfigError(
            f"{path}: serve.open_metrics: expected true or false, got {open_metrics!r}"
        )
    return ServeConfig(
        open_metrics=open_metrics,
        api_keys_file=(path.parent / file).resolve() if file else None,
        api_keys_env=_env_name(raw, "api_keys_env", path),
        cursor_secret_env=_env_name(raw, "cursor_secret_env", path),
        embedding_wait_s=float(wait),
        **{k: v for k, v in numbers.items() if v is not None},
    )


def _positive_int(raw: dict[str, Any], key: str, path: Path) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{path}: serve.{key}: expected a positive integer, got {value!r}")
    return value


def _env_name(raw: dict[str, Any], key: str, path: Path) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.replace("_", "").isalnum():
        raise ConfigError(f"{path}: serve.{key}: expected an environment variable name")
    return value
