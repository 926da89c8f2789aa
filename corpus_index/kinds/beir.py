"""The ``beir`` kind: ``corpus.jsonl`` with ``_id``, ``title``, ``text``, optional ``metadata``,
one passage per record (evaluation collections)."""

from __future__ import annotations

import json
import reprlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from corpus_index.errors import ConfigError, LimitExceededError, ParseError
from corpus_index.kinds.base import KindDefaults, json_depth, new_block, record_id
from corpus_index.records import Block, SourceDoc

if TYPE_CHECKING:
    from corpus_index.collection import CollectionConfig

BLOCK_KEY = "passage/0"
SOURCE_TYPE = "passage"
CORPUS_FILE = "corpus.jsonl"


def read_documents(root: Path) -> Iterator[SourceDoc]:
    """One document per line of ``corpus.jsonl``; ``doc_id`` is its ``_id`` (a record without
    a valid one, see :func:`~corpus_index.kinds.base.record_id`, is ``line-<n>``)."""
    for doc, _ in _records(root):
        yield doc


def load_documents(root: Path, doc_ids: Iterable[str]) -> Iterator[SourceDoc]:
    """The records of ``doc_ids``, in doc_id order (a repeated id in file order).

    The file is read twice: once for where each wanted record starts, then once in doc_id
    order, seeking to each, so no more than one record is held at a time.
    """
    wanted = set(doc_ids)
    where: dict[str, list[tuple[int, int]]] = {}  # doc_id -> [(offset, line)]
    for doc, offset in _records(root, keep_raw=False):
        if doc.doc_id in wanted:
            where.setdefault(doc.doc_id, []).append((offset, doc.line or 0))
    if not where:
        return
    path = _corpus_file(root)
    mtime = path.stat().st_mtime
    with path.open("rb") as fh:
        for doc_id in sorted(where):
            for offset, line in where[doc_id]:
                fh.seek(offset)
                raw = fh.readline().rstrip(b"\r\n")
                yield SourceDoc(
                    doc_id=doc_id, path=str(path), raw=raw, size=len(raw), mtime=mtime, line=line
                )


def _corpus_file(root: Path) -> Path:
    path = root / CORPUS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: a beir collection needs corpus.jsonl")
    return path


def _records(root: Path, *, keep_raw: bool = True) -> Iterator[tuple[SourceDoc, int]]:
    """Each non-blank line's document and the byte offset it starts at; without ``keep_raw``
    the documents carry no bytes (their ``size`` still counts them)."""
    path = _corpus_file(root)
    mtime = path.stat().st_mtime
    offset = 0
    with path.open("rb") as fh:
        for n, line in enumerate(fh, start=1):
            start, offset = offset, offset + len(line)
            raw = line.rstrip(b"\r\n")
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (ValueError, RecursionError):
                record = None
            # parse() reports a record without a valid id with its line number
            doc_id = (record_id(record.get("_id")) if isinstance(record, dict) else None) or (
                f"line-{n}"
            )
            yield (
                SourceDoc(
                    doc_id=doc_id,
                    path=str(path),
                    raw=raw if keep_raw else b"",
                    size=len(raw),
                    mtime=mtime,
                    line=n,
                ),
                start,
            )


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
        self, collection: CollectionConfig, *, owners: Mapping[str, str] | None = None
    ) -> Iterator[SourceDoc]:
        """See :func:`read_documents` (one file: ``owners`` has nothing to choose between)."""
        return read_documents(collection.path)

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
        return load_documents(collection.path, paths)

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
