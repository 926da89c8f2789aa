"""Records that flow through the pipeline, with the Arrow schemas that store them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


@dataclass(frozen=True, slots=True)
class SourceDoc:
    """One document as read from a collection root, before parsing."""

    doc_id: str
    path: str
    raw: bytes
    size: int
    mtime: float
    line: int | None = None  # for record-per-line sources (beir), the 1-based line
    # why the document could not be read (it is quarantined with this reason); raw is empty
    error: str | None = None
    # a record of a many-records file named by its place, its own id unreadable (it is
    # quarantined by parsing): the record it was may be one the file no longer shows
    unnamed: bool = False
    # not read for its size alone (over limits.max_document_bytes): the same regular file in
    # the root, larger, so its last good version may keep serving, stale
    too_large: bool = False


@dataclass(frozen=True, slots=True)
class Block:
    """A parsed unit of a document, with the access scope it inherits."""

    collection: str
    doc_id: str
    source_version: str
    kind: str
    source_type: str
    section: str
    block_key: str
    content: dict[str, Any]
    content_hash: str
    chunk_ref: str
    tenant_id: str
    acl_groups: tuple[str, ...]
    tier: str
    path: str
    line: int
    language: str = "en"
    event_date: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def source_id(self) -> str:
        return f"{self.collection}/{self.doc_id}"

    def to_row(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "doc_id": self.doc_id,
            "source_id": self.source_id,
            "source_version": self.source_version,
            "kind": self.kind,
            "source_type": self.source_type,
            "section": self.section,
            "block_key": self.block_key,
            "content": json.dumps(self.content, ensure_ascii=False, sort_keys=False),
            "content_hash": self.content_hash,
            "chunk_ref": self.chunk_ref,
            "tenant_id": self.tenant_id,
            "acl_groups": list(self.acl_groups),
            "tier": self.tier,
            "path": self.path,
            "line": self.line,
            "language": self.language,
            "event_date": self.event_date,
            "metadata": json.dumps(self.metadata, ensure_ascii=False, sort_keys=True, default=str),
        }


BLOCK_SCHEMA = pa.schema(
    [
        ("collection", pa.string()),
        ("doc_id", pa.string()),
        ("source_id", pa.string()),
        ("source_version", pa.string()),
        ("kind", pa.string()),
        ("source_type", pa.string()),
        ("section", pa.string()),
        ("block_key", pa.string()),
        ("content", pa.string()),
        ("content_hash", pa.string()),
        ("chunk_ref", pa.string()),
        ("tenant_id", pa.string()),
        ("acl_groups", pa.list_(pa.string())),
        ("tier", pa.string()),
        ("path", pa.string()),
        ("line", pa.int64()),
        ("language", pa.string()),
        ("event_date", pa.string()),
        ("metadata", pa.string()),
    ]
)

MANIFEST_SCHEMA = pa.schema(
    [
        ("collection", pa.string()),
        ("doc_id", pa.string()),
        ("source_id", pa.string()),
        ("path", pa.string()),
        ("size", pa.int64()),
        ("mtime", pa.float64()),
        ("raw_sha256", pa.string()),
        ("source_version", pa.string()),
        ("change", pa.string()),  # added | changed | unchanged | removed
    ]
)

QUARANTINE_SCHEMA = pa.schema(
    [
        ("collection", pa.string()),
        ("doc_id", pa.string()),
        ("source_id", pa.string()),
        ("source_version", pa.string()),
        ("path", pa.string()),
        ("line", pa.int64()),
        ("error", pa.string()),
    ]
)

# an input the embedder's server refused, and the document that holds it (per profile ×
# collection: see corpus_index.refusals)
REFUSAL_SCHEMA = pa.schema(
    [
        ("collection", pa.string()),
        ("doc_id", pa.string()),
        ("source_id", pa.string()),
        ("path", pa.string()),
        ("block_key", pa.string()),
        ("input_hash", pa.string()),
        ("error", pa.string()),
    ]
)

INPUT_SCHEMA = pa.schema(
    [
        ("chunk_ref", pa.string()),
        ("source_id", pa.string()),
        ("doc_id", pa.string()),
        ("section", pa.string()),
        ("block_key", pa.string()),
        ("content_hash", pa.string()),
        ("input_format", pa.string()),
        ("input_hash", pa.string()),
        ("text", pa.string()),
    ]
)


def embedding_schema(dim: int) -> pa.Schema:
    """Schema of an ``embeddings`` partition: one vector per input hash."""
    return pa.schema(
        [
            ("input_hash", pa.string()),
            ("vector", pa.list_(pa.float32(), dim)),
        ]
    )
