"""Source manifests and parsing: work proportional to change.

``scan_manifest`` fingerprints every document of a collection and diffs it against the last
manifest. ``parse_collection`` parses only documents whose version differs from what was
parsed (or quarantined) before, carries the rest forward, and keeps the last good blocks of
a document that stopped parsing, so it keeps serving while its error is visible.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

from corpus_index.config import CollectionConfig
from corpus_index.errors import ParseError
from corpus_index.hashing import sha256_hex
from corpus_index.parsing import parse_document, read_documents
from corpus_index.records import BLOCK_SCHEMA, MANIFEST_SCHEMA, QUARANTINE_SCHEMA, Block


@dataclass(frozen=True, slots=True)
class ManifestResult:
    """The new manifest and its diff against the previous one."""

    table: pa.Table
    added: int
    changed: int
    unchanged: int
    removed: int

    @property
    def documents(self) -> int:
        return self.added + self.changed + self.unchanged


def scan_manifest(collection: CollectionConfig, previous: pa.Table | None) -> ManifestResult:
    """Fingerprint every document under the collection root and diff against ``previous``."""
    before: dict[str, str] = {}
    if previous is not None:
        for row in previous.select(["doc_id", "source_version", "change"]).to_pylist():
            if row["change"] != "removed":
                before[row["doc_id"]] = row["source_version"]
    rows = []
    counts = {"added": 0, "changed": 0, "unchanged": 0, "removed": 0}
    seen: set[str] = set()
    for doc in read_documents(collection):
        if doc.doc_id in seen:
            raise ParseError(doc.path, f"duplicate document id {doc.doc_id!r}", line=doc.line)
        seen.add(doc.doc_id)
        digest = sha256_hex(doc.raw)
        version = digest[:16]
        old = before.get(doc.doc_id)
        change = "added" if old is None else ("unchanged" if old == version else "changed")
        counts[change] += 1
        rows.append(
            {
                "collection": collection.name,
                "doc_id": doc.doc_id,
                "source_id": f"{collection.name}/{doc.doc_id}",
                "path": doc.path,
                "size": doc.size,
                "mtime": doc.mtime,
                "raw_sha256": digest,
                "source_version": version,
                "change": change,
            }
        )
    for doc_id, version in sorted(before.items()):
        if doc_id not in seen:
            counts["removed"] += 1
            rows.append(
                {
                    "collection": collection.name,
                    "doc_id": doc_id,
                    "source_id": f"{collection.name}/{doc_id}",
                    "path": "",
                    "size": 0,
                    "mtime": 0.0,
                    "raw_sha256": "",
                    "source_version": version,
                    "change": "removed",
                }
            )
    table = pa.Table.from_pylist(rows, schema=MANIFEST_SCHEMA)
    return ManifestResult(table=table, **counts)


@dataclass(frozen=True, slots=True)
class ParseResult:
    """Blocks of every live document, and the quarantine list."""

    blocks: pa.Table
    quarantine: pa.Table
    parsed_documents: int
    carried_documents: int
    stale_documents: int  # quarantined but still serving their last good version

    @property
    def quarantined(self) -> int:
        return int(self.quarantine.num_rows)


def live_documents(manifest: pa.Table) -> dict[str, str]:
    """doc_id -> source_version of every document present in the manifest."""
    return {
        r["doc_id"]: r["source_version"]
        for r in manifest.select(["doc_id", "source_version", "change"]).to_pylist()
        if r["change"] != "removed"
    }


def parse_collection(
    collection: CollectionConfig,
    manifest: pa.Table,
    previous_blocks: pa.Table | None,
    previous_quarantine: pa.Table | None,
) -> ParseResult:
    """Parse what changed, carry forward the rest, quarantine what fails.

    Which documents to parse is decided by comparing the manifest's versions with what was
    parsed (or quarantined) before, not by the manifest's diff flags, so a run that died
    between two steps converges on the next one.
    """
    live = live_documents(manifest)
    parsed_version: dict[str, str] = {}
    prev_rows: dict[str, list[dict[str, object]]] = {}
    if previous_blocks is not None:
        for row in previous_blocks.to_pylist():
            prev_rows.setdefault(str(row["doc_id"]), []).append(row)
            parsed_version[str(row["doc_id"])] = str(row["source_version"])
    prev_quarantine: dict[str, dict[str, object]] = {}
    if previous_quarantine is not None:
        for row in previous_quarantine.to_pylist():
            prev_quarantine[str(row["doc_id"])] = row

    to_parse = {
        doc_id
        for doc_id, version in live.items()
        if parsed_version.get(doc_id) != version
        and prev_quarantine.get(doc_id, {}).get("source_version") != version
    }
    out_rows: list[dict[str, object]] = []
    quarantine_rows: list[dict[str, object]] = []
    carried = stale = 0
    for doc_id in sorted(live):
        if doc_id in to_parse:
            continue
        # still quarantined only if the broken version is the live one; a document reverted to
        # the version it last parsed at is healthy again
        if prev_quarantine.get(doc_id, {}).get("source_version") == live[doc_id]:
            quarantine_rows.append(prev_quarantine[doc_id])
            if doc_id in prev_rows:
                stale += 1
        if doc_id in prev_rows:
            out_rows.extend(prev_rows[doc_id])
            carried += 1

    parsed = 0
    if to_parse:
        for doc in _iter_docs(collection, to_parse):
            version = live[doc.doc_id]
            try:
                blocks: Iterable[Block] = parse_document(collection, doc, version)
                out_rows.extend(b.to_row() for b in blocks)
                parsed += 1
            except ParseError as exc:
                quarantine_rows.append(
                    {
                        "collection": collection.name,
                        "doc_id": doc.doc_id,
                        "source_id": f"{collection.name}/{doc.doc_id}",
                        "source_version": version,
                        "path": exc.path,
                        "line": exc.line,
                        "error": str(exc),
                    }
                )
                if doc.doc_id in prev_rows:  # last good version keeps serving, marked stale
                    out_rows.extend(prev_rows[doc.doc_id])
                    stale += 1
    out_rows.sort(key=lambda r: (str(r["doc_id"]), str(r["block_key"])))
    quarantine_rows.sort(key=lambda r: str(r["doc_id"]))
    return ParseResult(
        blocks=pa.Table.from_pylist(out_rows, schema=BLOCK_SCHEMA),
        quarantine=pa.Table.from_pylist(quarantine_rows, schema=QUARANTINE_SCHEMA),
        parsed_documents=parsed,
        carried_documents=carried,
        stale_documents=stale,
    )


def _iter_docs(collection: CollectionConfig, wanted: set[str]):  # type: ignore[no-untyped-def]
    for doc in read_documents(collection):
        if doc.doc_id in wanted:
            yield doc
