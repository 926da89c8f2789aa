"""Content-derived identities: every id in corpus-index comes from content, never position."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# what ``json.dumps`` with these options builds on every call, built once (thread-safe: encode
# keeps no state between calls)
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
)


def canonical_json(value: Any) -> str:
    """Serialize ``value`` as canonical JSON: sorted keys, no whitespace, UTF-8 kept as is."""
    return _CANONICAL.encode(value)


def sha256_hex(data: bytes | str) -> str:
    """Hex sha256 of bytes, or of a string encoded as UTF-8."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def value_digest(value: Any, *, size: int = 32) -> str:
    """Hex blake2b (``size`` bytes) of ``repr(value)``: a digest that changes when anything in
    ``value`` does, at a third of the cost of hashing its canonical JSON, for values made of
    str, int, float, bool and None in tuples, lists and dicts (their repr is the same in every
    process and tells any two of them apart: strings are quoted and escaped, containers
    bracketed). Not for ids or sets: a dict's repr keeps its insertion order, so the same
    dict built in another order has another digest (a change seen where there was none,
    never the reverse), and a set's order varies by process."""
    return hashlib.blake2b(repr(value).encode("utf-8"), digest_size=size).hexdigest()


def content_hash(content: Any) -> str:
    """``sha256:`` + hex sha256 of the block content as canonical JSON."""
    return "sha256:" + sha256_hex(canonical_json(content))


def input_hash(input_format: str, text: str) -> str:
    """Key of the embedding cache: sha256 of (input format, input text)."""
    return sha256_hex(canonical_json([input_format, text]))


def chunk_ref(collection: str, doc_id: str, version: str, block_key: str) -> str:
    """Stable address of one block version."""
    return f"chunk://{collection}/{doc_id}/v{version}/{block_key}"


def vector_id(chunk_ref_: str, input_format: str, backend_spec: str) -> str:
    """Id of one vector entry, unique within a generation."""
    return "vec_" + sha256_hex(canonical_json([chunk_ref_, input_format, backend_spec]))[:32]
