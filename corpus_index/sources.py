"""Source manifests and parsing: work proportional to change.

``scan_manifest`` fingerprints every document of a collection and diffs it against the last
manifest. ``parse_collection`` parses only documents whose version differs from what was
parsed (or quarantined) before, carries the rest forward, and keeps the last good blocks of
a document that stopped parsing, so it keeps serving while its error is visible.
"""

from __future__ import annotations

import json
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from dataclasses import dataclass, replace
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index.config import CollectionConfig
from corpus_index.errors import LimitExceededError, ParseError
from corpus_index.hashing import sha256_hex
from corpus_index.kinds import (
    StatCheck,
    list_documents,
    load_document,
    load_documents,
    parse_document,
    read_documents,
    refused_documents,
    scope_widening,
    unreadable,
)
from corpus_index.ordered import DocCursor
from corpus_index.records import (
    BLOCK_SCHEMA,
    MANIFEST_SCHEMA,
    QUARANTINE_SCHEMA,
    Block,
    SourceDoc,
    StreamCarry,
    StreamFile,
)


@dataclass(frozen=True, slots=True)
class ManifestResult:
    """The new manifest and its diff against the previous one."""

    table: pa.Table
    added: int
    changed: int
    unchanged: int
    removed: int
    # records not found this scan, kept as they were because their file could not be read
    # whole (counted among ``unchanged``)
    held: int = 0

    @property
    def documents(self) -> int:
        return self.added + self.changed + self.unchanged


# A manifest records when its scan started; a file whose size and mtime are as recorded is
# trusted unchanged (not read again) only if that mtime is this much older than the scan that
# recorded it, so a write in the same clock tick as the scan is never missed (git's rule).
SCANNED_AT_KEY = b"corpus_index.scanned_at"
RACY_SECONDS = 1.0
# The files of many records each (a message stream) that a scan read whole and found every
# record of named by its own id: their ``stat`` and their records' lines (StreamFile, as
# JSON), under the collection's configuration then. The next scan lists the records of such a
# file from the manifest rather than reading it, when its ``stat`` is as recorded and older
# than that scan by RACY_SECONDS, and the configuration (root, limits) is the same.
STREAM_FILES_KEY = b"corpus_index.stream_files"
_STREAM_FILES_FORMAT = 1
PARSE_BATCH = 500  # documents whose blocks are merged, sorted and written together


def scan_manifest(
    collection: CollectionConfig, previous: pa.Table | None, *, withdrawn: Set[str] = frozenset()
) -> ManifestResult:
    """Fingerprint every document under the collection root and diff against ``previous``.

    ``withdrawn`` names doc_ids removed from the index whose files stay (``CorpusIndex.remove``):
    they are scanned as if absent.

    Documents are hashed by content. For kinds with one file per document, a file whose path,
    size and mtime equal the previous manifest's (and are older than that scan) keeps its
    recorded hash without being read, so a scan costs a ``stat`` per unchanged file. For kinds
    with many records per file, a file the previous scan read whole, its every record named
    by its own id, is not read again while its ``stat`` is as that scan saw it (and older, as
    above): its records are listed with their recorded hashes (:data:`STREAM_FILES_KEY`).
    """
    scanned_at = time.time()
    before: dict[str, str] = {}
    # doc_id -> (path, size, mtime, raw sha256) of every document the previous scan listed
    listed: dict[str, tuple[str, int, float, str]] = {}
    recorded: dict[str, tuple[str, int, float, str]] = {}
    trust_before = 0.0
    if previous is not None:
        trust_before = float((previous.schema.metadata or {}).get(SCANNED_AT_KEY, b"0"))
        trust_before -= RACY_SECONDS
        cols = ["doc_id", "source_version", "change", "path", "size", "mtime", "raw_sha256"]
        for doc_id, version, change, path, size, mtime, raw in zip(
            *(previous[c].to_pylist() for c in cols), strict=True
        ):
            if change != "removed":
                before[doc_id] = version
                listed[doc_id] = place = (path, size, mtime, raw)
                if mtime < trust_before:
                    recorded[doc_id] = place
    # the manifest's columns (MANIFEST_SCHEMA but the collection's and the source ids, derived)
    doc_ids: list[str] = []
    paths: list[str] = []
    sizes: list[int] = []
    mtimes: list[float] = []
    digests: list[str] = []
    versions: list[str] = []
    changes: list[str] = []
    counts = {"added": 0, "changed": 0, "unchanged": 0, "removed": 0}
    seen: set[str] = set()
    troubled: set[str] = set()  # files with a record (or the file itself) that cannot be read
    scope = collection.block_scope
    _drop_moved(collection, before, listed, recorded)
    owners = {doc_id: place[0] for doc_id, place in listed.items()}
    carry = _stream_carry(collection, previous, listed, trust_before)
    for doc_id, path, size, mtime, digest, line, error, carried in _fingerprints(
        collection, recorded, owners, carry
    ):
        if error:
            troubled.add(path)
        if doc_id in withdrawn:
            continue
        if doc_id in seen:
            raise ParseError(path, f"duplicate document id {doc_id!r}", line=line)
        seen.add(doc_id)
        # a carried record's bytes and configuration (its scope with it) are as last scanned
        version = before[doc_id] if carried else document_version(digest, scope)
        old = before.get(doc_id)
        change = "added" if old is None else ("unchanged" if old == version else "changed")
        counts[change] += 1
        doc_ids.append(doc_id)
        paths.append(path)
        sizes.append(size)
        mtimes.append(mtime)
        digests.append(digest)
        versions.append(version)
        changes.append(change)
    held = 0
    for doc_id in sorted(before.keys() - seen):
        version = before[doc_id]
        path, size, mtime, raw = listed[doc_id]
        if doc_id not in withdrawn and path in troubled:
            # a record missing from a file that has a line (or is itself) unreadable may be
            # that line: it is kept as it was, not deleted, until the file reads whole
            held += 1
            counts["unchanged"] += 1
            doc_ids.append(doc_id)
            paths.append(path)
            sizes.append(size)
            mtimes.append(mtime)
            digests.append(raw)
            versions.append(version)
            changes.append("unchanged")
            continue
        counts["removed"] += 1
        doc_ids.append(doc_id)
        paths.append("")
        sizes.append(0)
        mtimes.append(0.0)
        digests.append("")
        versions.append(version)
        changes.append("removed")
    table = pa.table(
        {
            "collection": pa.array([collection.name] * len(doc_ids), pa.string()),
            "doc_id": doc_ids,
            "source_id": [f"{collection.name}/{d}" for d in doc_ids],
            "path": paths,
            "size": sizes,
            "mtime": mtimes,
            "raw_sha256": digests,
            "source_version": versions,
            "change": changes,
        },
        schema=MANIFEST_SCHEMA,
    )
    meta = {SCANNED_AT_KEY: repr(scanned_at).encode()}
    if carry.seen:
        files = {path: file.to_json() for path, file in carry.seen.items()}
        meta[STREAM_FILES_KEY] = json.dumps(
            {"format": _STREAM_FILES_FORMAT, "config": _read_under(collection), "files": files}
        ).encode()
    table = table.replace_schema_metadata(meta)
    return ManifestResult(table=table, held=held, **counts)


def _read_under(collection: CollectionConfig) -> str:
    """A digest of the configuration a collection's files are read under (its root, limits,
    symlink rule and the rest of its settings): records listed from the last scan were read
    under the same."""
    return sha256_hex(repr(collection))[:24]


def _stream_carry(
    collection: CollectionConfig,
    previous: pa.Table | None,
    listed: Mapping[str, tuple[str, int, float, str]],
    trust_before: float,
) -> StreamCarry:
    """The files of many records that the previous scan noted (:data:`STREAM_FILES_KEY`) and
    that are as it saw them, with their records as it listed them (``listed``: doc_id ->
    path, size, mtime, raw sha256): a file modified within RACY_SECONDS of that scan, or whose
    records it did not list one for one (a withdrawn record), is read. Nothing is carried
    when the note is missing, unreadable, of another format or of another configuration."""
    note = (previous.schema.metadata or {}).get(STREAM_FILES_KEY) if previous is not None else None
    if not note:
        return StreamCarry()
    try:
        kept = json.loads(note)
        if kept["format"] != _STREAM_FILES_FORMAT or kept["config"] != _read_under(collection):
            return StreamCarry()
        files = {str(path): StreamFile.from_json(v) for path, v in kept["files"].items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return StreamCarry()
    by_path: dict[str, list[tuple[str, int, str]]] = {}
    for doc_id, (path, size, _, digest) in listed.items():
        if path in files:
            by_path.setdefault(path, []).append((doc_id, size, digest))
    check = StatCheck(collection)
    unchanged: dict[str, tuple[StreamFile, list[SourceDoc]]] = {}
    for path, file in files.items():
        records = by_path.get(path, [])
        if file.mtime_ns >= trust_before * 1e9 or len(records) != file.records:
            continue
        try:
            st = check(path)
        except (OSError, ParseError):  # gone, or no longer to be read: a reading says why
            continue
        if not file.same(st):
            continue
        mtime = st.st_mtime
        unchanged[path] = (
            file,
            [  # SourceDoc(doc_id, path, raw, size, mtime, line, error, unnamed, too_large, sha256)
                SourceDoc(doc_id, path, b"", size, mtime, line, None, False, False, digest)
                for (doc_id, size, digest), line in zip(records, file.lines(), strict=True)
            ],
        )
    return StreamCarry(unchanged=unchanged)


def _drop_moved(
    collection: CollectionConfig,
    before: dict[str, str],
    listed: dict[str, tuple[str, int, float, str]],
    recorded: dict[str, tuple[str, int, float, str]],
) -> None:
    """Take out of the previous scan the documents a shard no longer owns because the shard
    count changed (``deals~00`` of 2 shards holds what ``deals~00`` and ``deals~02`` of 4
    hold) and that the collection still lists: they moved to the shard that owns them now,
    which lists them as added. Those the collection no longer lists stay, so this scan
    finds them removed and their deletion reaches every store."""
    moved = [d for d in before if not collection.owns(d)]
    if not moved:
        return
    whole = list_documents(replace(collection, shard=None)) or []
    present = {doc_id for doc_id, _ in whole}
    for doc_id in moved:
        if doc_id in present:
            del before[doc_id], listed[doc_id]
            recorded.pop(doc_id, None)


def document_version(raw_sha256: str, scope: str) -> str:
    """A document's version: of its bytes (their sha256, or of why they could not be read)
    and of its collection's :attr:`~corpus_index.config.CollectionConfig.block_scope`, so a
    change to either parses it again, under new chunk refs."""
    return sha256_hex(f"{raw_sha256}\0{scope}")[:16]


def _fingerprints(
    collection: CollectionConfig,
    recorded: dict[str, tuple[str, int, float, str]],
    owners: Mapping[str, str],
    carry: StreamCarry,
) -> Iterator[tuple[str, str, int, float, str, int | None, bool, bool]]:
    """``(doc_id, path, size, mtime, sha256 of the raw bytes, line, unreadable, carried)`` of
    every document; ``line`` is the record's line for many-records-per-file kinds, else None
    (``owners``: each document's path in the last scan, and ``carry``, the files listed from
    it, for those kinds); ``carried``: a record listed from the last scan, not read."""
    listing = list_documents(collection)
    if listing is None:  # many records per file: read them all, but those carried
        for doc in read_documents(collection, owners=owners, carry=carry):
            bad = doc.error is not None or doc.unnamed
            carried = doc.sha256 is not None and not bad
            yield doc.doc_id, doc.path, doc.size, doc.mtime, _digest(doc), doc.line, bad, carried
        return
    check = StatCheck(collection)  # the root and each folder resolved once per scan
    refused = refused_documents(collection, listing)
    for doc_id, path in listing:
        # a document that may not or cannot be read is listed with a version derived from the
        # reason, so parsing quarantines it (and retries it when the reason changes)
        try:
            if doc_id in refused:  # whatever its file's stat says
                raise ParseError(path, refused[doc_id])
            st = check(path)
            known = recorded.get(doc_id)
            if known is not None and known[:3] == (path, st.st_size, st.st_mtime):
                yield doc_id, path, st.st_size, st.st_mtime, known[3], None, False, False
                continue
            doc = load_document(collection, doc_id, path)
        except FileNotFoundError:  # removed between the listing and the read
            continue
        except (OSError, ParseError) as exc:
            doc = unreadable(doc_id, path, exc)
        yield doc_id, path, doc.size, doc.mtime, _digest(doc), None, doc.error is not None, False


def _digest(doc: SourceDoc) -> str:
    """sha256 of the document's bytes, or of why it could not be read."""
    if doc.error is not None:
        return sha256_hex(f"unreadable\0{doc.error}".encode())
    return doc.sha256 if doc.sha256 is not None else sha256_hex(doc.raw)


class _Parsed(NamedTuple):
    """One document's block rows, and what its parser read past (:attr:`Block.notes`), each
    with the line of the block that bears it."""

    rows: list[dict[str, object]]
    notes: list[tuple[int, str]]


def _parse_rows(collection: CollectionConfig, doc: SourceDoc, version: str) -> _Parsed:
    """The block rows of one document, with its notes (a quarantined document's are not
    reported: its error is).

    Raises:
        ParseError: the document could not be parsed, or a block is over
            ``limits.max_block_chars``; anything else its kind's parser raises.
    """
    blocks: Iterable[Block] = parse_document(collection, doc, version)
    limit = collection.limits.max_block_chars
    rows = []
    notes: list[tuple[int, str]] = []
    for block in blocks:
        notes.extend((block.line, note) for note in block.notes)
        row = block.to_row()
        size = len(str(row["content"]))
        if size > limit:
            raise LimitExceededError(
                doc.path,
                f"block {block.block_key!r} is {size} characters, over limits.max_block_chars "
                f"= {limit}; split the section or raise the limit in corpus.yaml",
                line=block.line,
            )
        rows.append(row)
    return _Parsed(rows, notes)


def _outside_scope(rows: pa.Table, docs: Iterable[str], collection: CollectionConfig) -> set[str]:
    """Those of ``docs`` with a block in ``rows`` that the collection's configuration would
    not give now (``scope_widening``: another tenant, an ACL group it no longer has, public
    where it is restricted)."""
    wanted = list(docs)
    if not wanted:
        return set()
    mine = rows.filter(pc.is_in(rows["doc_id"], pa.array(wanted, pa.string())))
    return {
        r["doc_id"]
        for r in mine.select(["doc_id", "tenant_id", "acl_groups", "tier"]).to_pylist()
        if scope_widening(
            collection, tenant=r["tenant_id"], acl_groups=r["acl_groups"] or (), tier=r["tier"]
        )
        is not None
    }


def _failure(doc: SourceDoc, reason: str) -> dict[str, object]:
    where = f"{doc.path}:{doc.line}" if doc.line is not None else doc.path
    return {"path": doc.path, "line": doc.line, "error": f"{where}: {reason}"}


def _note(path: str, note: str, line: int, documents: int) -> dict[str, object]:
    """A row of :attr:`ParseSummary.notes`: ``note`` of the file at ``path``, at the first
    ``line`` that bears it, with how many of the documents parsed do."""
    also = f" (and in {documents - 1} more of this file's documents)" if documents > 1 else ""
    return {
        "path": path,
        "line": line,
        "documents": documents,
        "note": f"{path}:{line}: {note}{also}",
    }


@dataclass(frozen=True, slots=True)
class ParseSummary:
    """What parsing a collection did; the blocks themselves went to the sink."""

    block_rows: int
    quarantine: pa.Table
    parsed_documents: int
    carried_documents: int
    stale_documents: int  # quarantined but still serving their last good version
    # one row per stale document: source_id, serving_version, broken_version, path, line, error
    stale: list[dict[str, object]]
    # one row per document this run quarantined: source_id, source_version, path, line, error
    new_quarantine: list[dict[str, object]]
    # what parsing read past in the documents this run parsed (an unknown key of a message
    # record), once per file and note: path, line (the first), documents, note (with both)
    notes: list[dict[str, object]]

    @property
    def quarantined(self) -> int:
        return int(self.quarantine.num_rows)


@dataclass(frozen=True, slots=True)
class ParseResult(ParseSummary):
    """A :class:`ParseSummary` with the blocks collected in memory (small collections, tests)."""

    blocks: pa.Table


@dataclass(frozen=True, slots=True)
class PreviousBlocks:
    """The blocks partition as last written: the version of each block's document, and a way
    to stream every block in ``(doc_id, block_key)`` order."""

    versions: pa.Table  # doc_id, source_version (one row per block, or per document)
    batches: Callable[[], Iterable[pa.RecordBatch]]

    @classmethod
    def of_table(cls, blocks: pa.Table | None) -> PreviousBlocks | None:
        if blocks is None:
            return None
        return cls(versions=blocks.select(["doc_id", "source_version"]), batches=blocks.to_batches)


def live_documents(manifest: pa.Table) -> dict[str, str]:
    """doc_id -> source_version of every document present in the manifest."""
    present = pc.fill_null(pc.not_equal(manifest["change"], "removed"), True)
    rows = manifest.select(["doc_id", "source_version"]).filter(present)
    return dict(zip(rows["doc_id"].to_pylist(), rows["source_version"].to_pylist(), strict=True))


def parse_collection(
    collection: CollectionConfig,
    manifest: pa.Table,
    previous_blocks: pa.Table | None,
    previous_quarantine: pa.Table | None,
) -> ParseResult:
    """:func:`parse_into` with the blocks collected into one table."""
    parts: list[pa.Table] = []
    summary = parse_into(
        parts.append,
        collection,
        manifest,
        PreviousBlocks.of_table(previous_blocks),
        previous_quarantine,
    )
    blocks = pa.concat_tables(parts) if parts else BLOCK_SCHEMA.empty_table()
    fields = {f: getattr(summary, f) for f in ParseSummary.__dataclass_fields__}
    return ParseResult(**fields, blocks=blocks)


def parse_into(
    sink: Callable[[pa.Table], None],
    collection: CollectionConfig,
    manifest: pa.Table,
    previous: PreviousBlocks | None,
    previous_quarantine: pa.Table | None,
) -> ParseSummary:
    """Parse what changed, carry forward the rest, quarantine what fails.

    Which documents to parse is decided by comparing the manifest's versions with what was
    parsed (or quarantined) before, not by the manifest's diff flags, so a run that died
    between two steps converges on the next one. Only the documents to parse are opened; the
    rest are carried forward as Arrow rows, never as Python objects.

    Blocks reach ``sink`` in ``(doc_id, block_key)`` order, PARSE_BATCH documents at a time:
    the new blocks of a range of documents merged with the carried blocks of the same range,
    read forward from ``previous``. Nothing holds the whole collection's blocks.

    What the parsers read past (an unknown key of a message record) is reported in the
    summary's ``notes``, once per file and note, at its first line: of the documents this run
    parsed, as ``new_quarantine`` is of those it quarantined.
    """
    live = live_documents(manifest)
    parsed_version: dict[str, str] = {}
    if previous is not None and previous.versions.num_rows:
        versions = previous.versions.group_by(["doc_id", "source_version"]).aggregate([])
        parsed_version = dict(
            zip(
                versions["doc_id"].to_pylist(),
                versions["source_version"].to_pylist(),
                strict=True,
            )
        )
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
    carry: set[str] = set()  # documents whose previous blocks are kept
    quarantine_rows: list[dict[str, object]] = []
    fresh: list[dict[str, object]] = []  # quarantined by this run (not carried from the last)
    stale = 0
    for doc_id in sorted(live):
        if doc_id in to_parse:
            continue
        # still quarantined only if the broken version is the live one; a document reverted to
        # the version it last parsed at is healthy again
        if prev_quarantine.get(doc_id, {}).get("source_version") == live[doc_id]:
            quarantine_rows.append(prev_quarantine[doc_id])
            if doc_id in parsed_version:
                stale += 1
        if doc_id in parsed_version:
            carry.add(doc_id)
    carried = len(carry)

    docs: Iterator[SourceDoc] = iter(())
    if to_parse:
        paths = dict(zip(manifest["doc_id"].to_pylist(), manifest["path"].to_pylist(), strict=True))
        # in doc_id order; records sharing a file named as the scan named them
        docs = load_documents(
            collection, {d: paths[d] for d in to_parse}, owners={d: paths[d] for d in live}
        )
    pending = next(docs, None)
    # the last run's blocks are read when some are carried, or may be: a document parsed
    # again that fails keeps serving its last good blocks (stale), even when every document
    # changed and none is carried as it was
    may_carry = bool(carry) or any(d in parsed_version for d in to_parse)
    kept = DocCursor(
        previous.batches() if previous is not None and may_carry else (),
        BLOCK_SCHEMA,
        what=f"parsed_blocks of {collection.name}",
    )
    order = sorted(live)
    carry_ids = sorted(carry)
    parsed = written = 0
    noted: dict[tuple[str, str], tuple[int, int]] = {}  # (path, note) -> first line, documents
    for start in range(0, len(order), PARSE_BATCH):
        first, last = order[start], order[min(start + PARSE_BATCH, len(order)) - 1]
        rows: list[dict[str, object]] = []
        newly_stale: list[str] = []
        while pending is not None and pending.doc_id <= last:
            doc, pending = pending, next(docs, None)
            version = live[doc.doc_id]
            failure: dict[str, object] | None = None
            try:
                if doc.error is not None:  # it could not be read
                    failure = {"path": doc.path, "line": doc.line, "error": doc.error}
                else:
                    parsed_rows, notes = _parse_rows(collection, doc, version)
                    rows.extend(parsed_rows)
                    for line, note in notes:
                        at, count = noted.get((doc.path, note), (line, 0))
                        noted[doc.path, note] = (min(at, line), count + 1)
                    parsed += 1
            except ParseError as exc:
                failure = {"path": exc.path, "line": exc.line, "error": str(exc)}
            except RecursionError:
                failure = _failure(doc, "nested too deeply to parse (Python's recursion limit)")
            except MemoryError:
                failure = _failure(doc, "ran out of memory while parsing")
            except Exception as exc:  # noqa: BLE001 - one bad document never stops the others
                failure = _failure(doc, f"could not be parsed: {type(exc).__name__}: {exc}")
            if failure is not None:
                row = {
                    "collection": collection.name,
                    "doc_id": doc.doc_id,
                    "source_id": f"{collection.name}/{doc.doc_id}",
                    "source_version": version,
                    **failure,
                }
                quarantine_rows.append(row)
                fresh.append(row)
                # the last good version of a document that no longer parses keeps serving, stale,
                # as does one grown past limits.max_document_bytes (the same file, larger); one
                # that cannot or may not be read (now a symlink out of the root, a FIFO) does
                # not: what it is now is unknown
                if doc.doc_id in parsed_version and (doc.error is None or doc.too_large):
                    carry.add(doc.doc_id)
                    newly_stale.append(doc.doc_id)
                    stale += 1
        carried_rows = kept.through(last)
        # ...but only within the scope the configuration gives now: a collection whose ACL
        # groups were narrowed since never serves a broken document's wider blocks
        for doc_id in _outside_scope(carried_rows, newly_stale, collection):
            carry.discard(doc_id)
            stale -= 1
        if len(carry) != len(carry_ids):  # a stale document joined (carry only grows)
            carry_ids = sorted(carry)
        # the rows read are of this range's documents (those before it were read with the
        # ranges before), so the ids looked up are the range's: a set of hundreds, not of all
        in_range = carry_ids[bisect_left(carry_ids, first) : bisect_right(carry_ids, last)]
        keep = pc.is_in(carried_rows["doc_id"], value_set=pa.array(in_range, pa.string()))
        if not pc.all(keep).as_py():
            carried_rows = carried_rows.filter(keep)
        # (doc_id, block_key) order; Arrow compares strings by UTF-8 bytes, i.e. by code point,
        # as Python's sorted() does. A range with nothing parsed is the previous rows, in order.
        table = (
            pa.concat_tables(
                [carried_rows, pa.Table.from_pylist(rows, schema=BLOCK_SCHEMA)]
            ).sort_by([("doc_id", "ascending"), ("block_key", "ascending")])
            if rows
            else carried_rows
        )
        if table.num_rows:
            sink(table)
            written += table.num_rows
    quarantine_rows.sort(key=lambda r: str(r["doc_id"]))
    return ParseSummary(
        new_quarantine=[
            {k: r[k] for k in ("source_id", "source_version", "path", "line", "error")}
            for r in fresh
        ],
        notes=[_note(path, note, *noted[path, note]) for path, note in sorted(noted)],
        block_rows=written,
        quarantine=pa.Table.from_pylist(quarantine_rows, schema=QUARANTINE_SCHEMA),
        parsed_documents=parsed,
        carried_documents=carried,
        stale_documents=stale,
        stale=[
            {
                "source_id": q["source_id"],
                "serving_version": parsed_version[str(q["doc_id"])],
                "broken_version": q["source_version"],
                "path": q["path"],
                "line": q["line"],
                "error": q["error"],
            }
            for q in quarantine_rows
            if str(q["doc_id"]) in carry
        ],
    )
