"""Readers (documents from a collection root) and parsers (blocks from a document), per kind."""

from __future__ import annotations

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
