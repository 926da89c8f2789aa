"""Readers (documents from a collection root) and parsers (blocks from a document), per kind."""

from __future__ import annotations

import os
from collections.abc import Iterator

from corpus_index.config import CollectionConfig
from corpus_index.errors import ConfigError
from corpus_index.parsing import beir, uw
from corpus_index.records import Block, SourceDoc


def read_documents(collection: CollectionConfig) -> Iterator[SourceDoc]:
    """Every document under the collection's root, in a stable order."""
    if collection.kind == "uw_deals":
        return uw.read_documents(collection.path)
    if collection.kind == "beir":
        return beir.read_documents(collection.path)
    raise ConfigError(f"collections.{collection.name}.kind: no reader for {collection.kind!r}")


def list_documents(collection: CollectionConfig) -> list[tuple[str, str]] | None:
    """``(doc_id, path)`` of every document without reading any, for kinds with one file per
    document; None for kinds with many records per file (``beir``), read whole instead."""
    if collection.kind == "uw_deals":
        return uw.list_documents(collection.path)
    if collection.kind == "beir":
        return None
    raise ConfigError(f"collections.{collection.name}.kind: no reader for {collection.kind!r}")


def load_document(collection: CollectionConfig, doc_id: str, path: str) -> SourceDoc:
    """One document of a one-file-per-document kind (see :func:`list_documents`), read now."""
    if collection.kind == "uw_deals":
        return uw.load_document(doc_id, path)
    raise ConfigError(
        f"collections.{collection.name}.kind: {collection.kind!r} has no document files"
    )


def load_documents(collection: CollectionConfig, paths: dict[str, str]) -> Iterator[SourceDoc]:
    """The documents named in ``paths`` (doc_id -> path, as a manifest records them), in doc_id
    order, one at a time. One-file-per-document kinds open only those files."""
    if collection.kind == "beir":  # many records per file: located first, then read in order
        yield from beir.load_documents(collection.path, paths)
        return
    for doc_id in sorted(paths):
        try:
            yield load_document(collection, doc_id, paths[doc_id])
        except FileNotFoundError:  # removed since the scan: the next scan records it
            continue


def parse_document(collection: CollectionConfig, doc: SourceDoc, version: str) -> list[Block]:
    """Blocks of one document.

    Raises:
        ParseError: the document is malformed; the message names the file and line.
    """
    if collection.kind == "uw_deals":
        return uw.parse(collection, doc, version)
    if collection.kind == "beir":
        return beir.parse(collection, doc, version)
    raise ConfigError(f"collections.{collection.name}.kind: no parser for {collection.kind!r}")


def fingerprint(collection: CollectionConfig) -> str:
    """A cheap digest of the collection's files (relative path, size, mtime in ns), read with
    ``stat`` only: it changes when a document is added, changed or removed. A missing root
    fingerprints as ``missing``."""
    import hashlib

    root = collection.path
    if not root.is_dir():
        return "missing"
    if collection.kind == "uw_deals":
        files = [(doc_id + uw.SUFFIX, path) for doc_id, path in uw.list_documents(root)]
    elif collection.kind == "beir":
        corpus = root / "corpus.jsonl"
        files = [("corpus.jsonl", str(corpus))] if corpus.is_file() else []
    else:
        raise ConfigError(f"collections.{collection.name}.kind: no reader for {collection.kind!r}")
    digest = hashlib.sha256()
    for rel, path in files:
        try:
            stat = os.stat(path)
        except FileNotFoundError:  # removed between the listing and the stat
            continue
        digest.update(f"{rel}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return f"{len(files)}:{digest.hexdigest()[:24]}"
