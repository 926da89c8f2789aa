"""The collection-kind protocol, and defaults a kind module builds on.

A collection kind says everything the pipeline needs to know about one layout of source
documents. The steps never ask which kind they hold; they ask the kind (DESIGN §3).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from corpus_index.records import SourceDoc

if TYPE_CHECKING:  # config imports the registry to validate kind names
    from corpus_index.config import CollectionConfig
    from corpus_index.records import Block


class CollectionKind(Protocol):
    """How one kind of collection is read, parsed, embedded, filtered and shown.

    Finding documents:
        ``list_documents`` names every document without reading any (``(doc_id, path)`` in a
        stable order), or returns None for kinds that hold many records per file; those are
        read whole with ``read_documents``. ``load_document`` reads one listed document now;
        ``load_documents`` reads those a manifest names, in doc_id order, one at a time.
        ``fingerprint_files`` names the files whose ``stat`` fingerprints the collection (the
        sensor's cheap change test).

    Blocks:
        ``parse`` turns one document into blocks (raising ``ParseError`` with file and line);
        each block's ``kind`` is the kind's ``name``, and its tier starts at ``default_tier``
        for its ``source_type`` (a document may narrow it, never widen it).
        ``granularity`` says whether a block of a section is an embeddable unit and how it is
        cut (``block`` or ``paragraph``), given the configured section registry; None leaves
        the block out of the index.

    Filtering and display:
        ``promoted_columns`` are the filter columns the kind fills (their union over the
        registry is the generation schema); ``promote`` computes them from a block's
        ``metadata``. ``excerpt`` renders a hit as prose from the row's stored canonical input
        (its ``text``) and ``section``: what a person reads, not what the model read.

    Capabilities:
        ``sidecars``: documents get RFC 0013 sidecars. ``writable``: ``CorpusIndex.add`` and
        ``remove`` may place and remove its documents as files (RFC 0013 underwriting files).
        ``grouped``: its units are later grouped across documents (the ``linked_groups`` step,
        DESIGN §10b). A grouped kind (``messages``) puts in each block's ``metadata`` what the
        grouping reads: ``author``, ``recipients``, ``channel``, ``timestamp`` (ISO 8601 with
        offset) and ``location``; the grouping itself (conversations, Q&A pairs, incident and
        daily contexts) is a step of its own that reads those units, and its groups are rows
        of ``kind: group`` beside them. No kind registered today is grouped.
    """

    name: str
    sidecars: bool
    writable: bool
    grouped: bool
    promoted_columns: tuple[tuple[str, pa.DataType], ...]

    def list_documents(self, collection: CollectionConfig) -> list[tuple[str, str]] | None: ...

    def read_documents(self, collection: CollectionConfig) -> Iterator[SourceDoc]: ...

    def load_document(self, doc_id: str, path: str) -> SourceDoc: ...

    def load_documents(
        self, collection: CollectionConfig, paths: Mapping[str, str]
    ) -> Iterator[SourceDoc]: ...

    def fingerprint_files(self, collection: CollectionConfig) -> list[tuple[str, str]]: ...

    def parse(self, collection: CollectionConfig, doc: SourceDoc, version: str) -> list[Block]: ...

    def default_tier(self, collection: CollectionConfig, source_type: str) -> str: ...

    def granularity(self, section: str, sections: Mapping[str, str]) -> str | None: ...

    def promote(self, metadata: Mapping[str, Any]) -> dict[str, Any]: ...

    def excerpt(self, text: str, *, section: str) -> str: ...


class KindDefaults:
    """What most kinds do: no capabilities, every block a whole unit, the collection's tier,
    no promoted columns, the stored text as the excerpt."""

    sidecars = False
    writable = False
    grouped = False
    promoted_columns: tuple[tuple[str, pa.DataType], ...] = ()

    def default_tier(self, collection: CollectionConfig, source_type: str) -> str:
        """The collection's tier, whatever the source type."""
        return collection.tier

    def granularity(self, section: str, sections: Mapping[str, str]) -> str | None:
        """Every block is one embeddable unit."""
        return "block"

    def promote(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """No filter columns."""
        return {}

    def excerpt(self, text: str, *, section: str) -> str:
        """The stored text, whitespace collapsed."""
        return " ".join(text.split())


class FileKind(KindDefaults):
    """A kind with one file per document, found by its name's ``suffix`` under the root."""

    suffix = ""

    def list_documents(self, collection: CollectionConfig) -> list[tuple[str, str]]:
        """``(doc_id, path)`` of every file with the suffix (doc_id: the posix path below the
        root without the suffix), in path order, none opened."""
        return list_files(collection.path, self.suffix)

    def load_document(self, doc_id: str, path: str) -> SourceDoc:
        """One document, read now."""
        with open(path, "rb") as fh:
            stat = os.fstat(fh.fileno())
            raw = fh.read()
        return SourceDoc(doc_id=doc_id, path=path, raw=raw, size=stat.st_size, mtime=stat.st_mtime)

    def read_documents(self, collection: CollectionConfig) -> Iterator[SourceDoc]:
        """Every document, in path order."""
        for doc_id, path in self.list_documents(collection):
            yield self.load_document(doc_id, path)

    def load_documents(
        self, collection: CollectionConfig, paths: Mapping[str, str]
    ) -> Iterator[SourceDoc]:
        """The named documents in doc_id order; one removed since the scan is skipped (the
        next scan records it)."""
        for doc_id in sorted(paths):
            try:
                yield self.load_document(doc_id, paths[doc_id])
            except FileNotFoundError:
                continue

    def fingerprint_files(self, collection: CollectionConfig) -> list[tuple[str, str]]:
        """Every document file, named by its path below the root."""
        return [(doc_id + self.suffix, path) for doc_id, path in self.list_documents(collection)]


def list_files(root: Path, suffix: str) -> list[tuple[str, str]]:
    """``(doc_id, path)`` of every file named ``*<suffix>`` under ``root``, in path order (the
    order of ``sorted(Path.rglob(...))``), without opening any; symlinked folders are not
    followed, so a reader never leaves the root.

    Raises:
        FileNotFoundError: the root is missing or not a folder.
    """
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: collection root does not exist or is not a folder")
    found: list[tuple[tuple[str, ...], str]] = []
    stack: list[tuple[Path, tuple[str, ...]]] = [(root, ())]
    while stack:
        folder, parts = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):  # as rglob: no symlinked folders
                    stack.append((Path(entry.path), (*parts, entry.name)))
                elif entry.name.endswith(suffix) and entry.is_file():
                    found.append(((*parts, entry.name), entry.path))
    found.sort()
    return [("/".join(rel)[: -len(suffix)], path) for rel, path in found]
