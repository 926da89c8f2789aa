"""Records that flow through the pipeline, with the Arrow schemas that store them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
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
    # the sha256 of the record's bytes as the last scan read them, for a record of a file that
    # scan found unchanged and so did not read (``raw`` is then empty; see StreamCarry)
    sha256: str | None = None


@dataclass(frozen=True, slots=True)
class StreamFile:
    """What a scan saw of a file of many records that it read whole and whose every record is
    named by its own id: the file's ``stat`` (to know it again without reading it) and the
    lines its records are on, as runs of ``(first line, count)``."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    runs: tuple[tuple[int, int], ...]

    @classmethod
    def seen(cls, st: os.stat_result, lines: Sequence[int]) -> StreamFile:
        runs: list[tuple[int, int]] = []
        for line in lines:
            if runs and runs[-1][0] + runs[-1][1] == line:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((line, 1))
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, tuple(runs))

    def same(self, st: os.stat_result) -> bool:
        """Whether ``st`` is the file as seen: same size, modification and change times (a
        ``chmod`` changes the latter) and inode (a file renamed into its place)."""
        return (self.size, self.mtime_ns, self.ctime_ns, self.inode) == (
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,
            st.st_ino,
        )

    @property
    def records(self) -> int:
        return sum(n for _, n in self.runs)

    def lines(self) -> Iterator[int]:
        for first, n in self.runs:
            yield from range(first, first + n)

    def to_json(self) -> list[Any]:
        return [self.size, self.mtime_ns, self.ctime_ns, self.inode, [list(r) for r in self.runs]]

    @classmethod
    def from_json(cls, value: Any) -> StreamFile:
        """Raises ValueError (or TypeError) for anything :meth:`to_json` does not write."""
        size, mtime_ns, ctime_ns, inode, runs = value
        made = cls(
            int(size),
            int(mtime_ns),
            int(ctime_ns),
            int(inode),
            tuple((int(a), int(n)) for a, n in runs),
        )
        if any(a < 1 or n < 1 for a, n in made.runs):
            raise ValueError(f"line runs {runs!r}")
        return made


@dataclass(slots=True)
class StreamCarry:
    """What a scan and a kind whose records share files pass each other
    (``read_documents(carry=...)``): ``unchanged`` (path -> what the last scan saw of it and
    its records in line order, with ``sha256`` and no bytes), the files the last scan read
    whole that are as it saw them, which the kind lists without reading; and ``seen``, filled
    by the kind: the files it read whole (or listed from ``unchanged``) whose every record has
    its own id, for the next scan."""

    unchanged: Mapping[str, tuple[StreamFile, Sequence[SourceDoc]]] = field(default_factory=dict)
    seen: dict[str, StreamFile] = field(default_factory=dict)


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
    # what parsing noticed in the block's document and read past (an unknown key of a message
    # record): reported with the parse outcome beside the quarantined documents, never stored
    notes: tuple[str, ...] = field(default=(), compare=False)

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
