"""The ``beir`` kind: ``corpus.jsonl`` with ``_id``, ``title``, ``text``, optional ``metadata``,
one passage per record (evaluation collections)."""

from __future__ import annotations

import json
import reprlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from corpus_index.errors import ConfigError, LimitExceededError, ParseError
from corpus_index.kinds.base import (
    KindDefaults,
    json_depth,
    new_block,
    open_checked,
    record_id,
    unreadable,
)
from corpus_index.records import Block, SourceDoc, StreamCarry

if TYPE_CHECKING:
    from corpus_index.collection import CollectionConfig

BLOCK_KEY = "passage/0"
SOURCE_TYPE = "passage"
CORPUS_FILE = "corpus.jsonl"
PLACE_PREFIX = "line-"  # a record without a valid _id is named by its line: line-<n>
_SKIP_BYTES = 1 << 20  # a line over the limit is passed over this many bytes at a time


def read_documents(collection: CollectionConfig) -> Iterator[SourceDoc]:
    """One document per line of ``corpus.jsonl``; ``doc_id`` is its ``_id`` (a record without
    a valid one, see :func:`~corpus_index.kinds.base.record_id`, or a line over
    ``limits.max_document_bytes``, is named by its place, ``line-<n>``, after the records with
    their own ids: see :func:`_place_name`). A file that may not be read (a symlink out of the
    root, a FIFO) is one document, ``corpus.jsonl``, with the reason."""
    for doc, _ in _records(collection):
        yield doc


def load_documents(collection: CollectionConfig, doc_ids: Iterable[str]) -> Iterator[SourceDoc]:
    """The records of ``doc_ids``, in doc_id order (a repeated id in file order).

    The file is read twice: once for where each wanted record starts, then once in doc_id
    order, seeking to each, so no more than one record is held at a time. One that could not
    be read (its line over the limit, or the file) comes with the reason, as the scan had it.
    """
    wanted = set(doc_ids)
    where: dict[str, list[tuple[int, SourceDoc]]] = {}  # doc_id -> [(offset, doc)]
    for doc, offset in _records(collection, keep_raw=False):
        if doc.doc_id in wanted:
            where.setdefault(doc.doc_id, []).append((offset, doc))
    found = [place for doc_id in sorted(where) for place in where[doc_id]]
    if all(doc.error is not None for _, doc in found):  # none to read again (or the file)
        yield from (doc for _, doc in found)
        return
    fh, _ = open_checked(collection, str(_corpus_file(collection.path)), sized=False)
    with fh:
        for offset, doc in found:
            if doc.error is None:
                fh.seek(offset)
                doc = replace(doc, raw=fh.readline(doc.size + 2).rstrip(b"\r\n"))
            yield doc


def _corpus_file(root: Path) -> Path:
    path = root / CORPUS_FILE
    if not path.exists():  # a FIFO or a folder there is refused by name when read
        raise FileNotFoundError(f"{path}: a beir collection needs corpus.jsonl")
    return path


def _records(
    collection: CollectionConfig, *, keep_raw: bool = True
) -> Iterator[tuple[SourceDoc, int]]:
    """Each non-blank line's document and the byte offset it starts at: the records with their
    own ids in file order, then those named by their place; without ``keep_raw`` the documents
    carry no bytes (their ``size`` still counts them).

    The file passes the collection's root and special-file checks, not its size limit (a corpus
    is large), and is read a line at a time, each only up to ``limits.max_document_bytes``.
    """
    path = str(_corpus_file(collection.path))
    try:
        fh, st = open_checked(collection, path, sized=False)
    except FileNotFoundError:
        raise
    except (OSError, ParseError) as exc:
        yield unreadable(CORPUS_FILE, path, exc), 0
        return
    limit = collection.limits.max_document_bytes
    offset = 0
    placed: list[tuple[int, int, int]] = []  # (line, offset, size) of each line named by place
    own: set[str] = set()  # the records' own ids that have a place's form
    with fh:
        for n, (raw, taken, size) in enumerate(_lines(fh, limit), start=1):
            start, offset = offset, offset + taken
            if raw is None:  # over the limit: named once every record's own id is known
                placed.append((n, start, size))
                continue
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (ValueError, RecursionError):
                record = None
            doc_id = record_id(record.get("_id")) if isinstance(record, dict) else None
            if doc_id is None:  # likewise
                placed.append((n, start, size))
                continue
            if doc_id.startswith(PLACE_PREFIX):
                own.add(doc_id)
            yield (
                SourceDoc(
                    doc_id=doc_id,
                    path=path,
                    raw=raw if keep_raw else b"",
                    size=size,
                    mtime=st.st_mtime,
                    line=n,
                ),
                start,
            )
        for n, start, size in placed:
            name = _place_name(n, own)
            if size > limit:
                over = LimitExceededError(
                    path,
                    f"record is {size} bytes, over limits.max_document_bytes = {limit}; split "
                    "it or raise the limit in corpus.yaml",
                    line=n,
                )
                doc = unreadable(name, path, over)
                yield replace(doc, size=size, mtime=st.st_mtime, line=n), start
                continue
            # parse() reports a record without a valid id with its line number; its bytes are
            # read again here rather than held through the whole file
            raw = b""
            if keep_raw:
                fh.seek(start)
                raw = fh.readline(size + 2).rstrip(b"\r\n")
            doc = SourceDoc(doc_id=name, path=path, raw=raw, size=size, mtime=st.st_mtime, line=n)
            yield doc, start


def _place_name(line: int, own: set[str]) -> str:
    """The id of the record on ``line`` that has no valid ``_id`` of its own: ``line-<n>``, or
    where a record's own ``_id`` (``own``) is that, ``line-<n>#2`` and on. Any text a valid
    ``_id`` may be, so the place gives way: no bad line takes a record's id, nor stops the
    scan as a duplicate of it."""
    name = f"{PLACE_PREFIX}{line}"
    tries = 1
    while name in own:
        tries += 1
        name = f"{PLACE_PREFIX}{line}#{tries}"
    return name


def _lines(fh: BinaryIO, limit: int) -> Iterator[tuple[bytes | None, int, int]]:
    """Each line of ``fh`` without its end (None when longer than ``limits.max_document_bytes``,
    the rest of it skipped unread into memory), the bytes it takes and its length."""
    while line := fh.readline(limit + 3):  # room for the line end, and one byte more
        taken = len(line)
        raw = line.rstrip(b"\r\n")
        if len(raw) <= limit:
            yield raw, taken, len(raw)
            continue
        while not line.endswith(b"\n") and (line := fh.readline(_SKIP_BYTES)):
            taken += len(line)
        yield None, taken, taken - (len(line) - len(line.rstrip(b"\r\n")))


def parse(collection: CollectionConfig, doc: SourceDoc, version: str) -> list[Block]:
    """One ``passage`` block per record."""
    line = doc.line or 1
    limits = collection.limits
    if len(doc.raw) > limits.max_document_bytes:
        raise LimitExceededError(
            doc.path,
            f"record is {len(doc.raw)} bytes, over limits.max_document_bytes = "
            f"{limits.max_document_bytes}; split it or raise the limit in corpus.yaml",
            line=line,
        )
    too_deep = False
    try:
        record = json.loads(doc.raw)
    except ValueError as exc:
        raise ParseError(doc.path, f"not valid JSON: {exc}", line=line) from None
    except RecursionError:  # nested deeper than Python parses: over any depth limit
        record, too_deep = None, True
    if too_deep or json_depth(record) > limits.max_nesting_depth:
        raise LimitExceededError(
            doc.path,
            f"record nested deeper than limits.max_nesting_depth = {limits.max_nesting_depth}",
            line=line,
        )
    if not isinstance(record, dict) or "_id" not in record:
        raise ParseError(doc.path, "record lacks '_id'", line=line)
    if record_id(record["_id"]) is None:
        raise ParseError(
            doc.path,
            "'_id' must be a non-blank string or an integer, with no control character or lone "
            f"UTF-16 surrogate (got {reprlib.repr(record['_id'])})",
            line=line,
        )
    content = {"title": str(record.get("title") or ""), "text": str(record.get("text") or "")}
    metadata = record.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ParseError(doc.path, "'metadata' must be an object", line=line)
    return [
        new_block(
            BEIR,
            collection,
            doc,
            version,
            source_type=SOURCE_TYPE,
            section=SOURCE_TYPE,
            block_key=BLOCK_KEY,
            content=content,
            line=line,
            metadata={str(k): v for k, v in metadata.items()},
        )
    ]


class Beir(KindDefaults):
    """Passage records: every record one embeddable block, no filter columns, the stored
    ``title text`` as its excerpt."""

    name = "beir"
    source_types = (SOURCE_TYPE,)
    unshardable_why = "its records share one file, corpus.jsonl"

    def list_documents(self, collection: CollectionConfig) -> None:
        """None: many records share one file, so the collection is read whole."""
        return None

    def read_documents(
        self,
        collection: CollectionConfig,
        *,
        owners: Mapping[str, str] | None = None,
        carry: StreamCarry | None = None,
    ) -> Iterator[SourceDoc]:
        """See :func:`read_documents` (one file: ``owners`` has nothing to choose between;
        ``carry`` is not noted, so the file is read each scan)."""
        return read_documents(collection)

    def load_document(self, collection: CollectionConfig, doc_id: str, path: str) -> SourceDoc:
        """Refused: a record is found by reading its file (:meth:`load_documents`).

        Raises:
            ConfigError: always.
        """
        raise ConfigError(f"{path}: a beir record {doc_id!r} has no file of its own")

    def load_documents(
        self,
        collection: CollectionConfig,
        paths: Mapping[str, str],
        *,
        owners: Mapping[str, str] | None = None,
    ) -> Iterator[SourceDoc]:
        """See :func:`load_documents` (``owners``: as for :meth:`read_documents`)."""
        return load_documents(collection, paths)

    def fingerprint_files(self, collection: CollectionConfig) -> list[tuple[str, str]]:
        """``corpus.jsonl``, when it is there."""
        corpus = collection.path / CORPUS_FILE
        return [(CORPUS_FILE, str(corpus))] if corpus.is_file() else []

    def parse(self, collection: CollectionConfig, doc: SourceDoc, version: str) -> list[Block]:
        """See :func:`parse`."""
        return parse(collection, doc, version)

    def excerpt(self, text: str, *, section: str) -> str:
        """The passage's ``title text`` as stored (it has no field paths to drop)."""
        return " ".join(text.split())


BEIR = Beir()
