"""Collection kinds: one module per kind behind :class:`CollectionKind`, registered in ``KINDS``.

Adding a kind means a module that implements the protocol (usually on :class:`FileKind` or
:class:`KindDefaults`), one line in ``KINDS`` and its tests. Nothing outside this package asks
which kind a collection is; it asks the kind (``kind_of(collection).sidecars``, ...).

The functions below are the collection-level front door the pipeline steps use: each finds the
collection's kind and hands it the work.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from corpus_index.errors import ConfigError
from corpus_index.group_records import GROUP_KIND
from corpus_index.kinds.base import (
    CollectionKind,
    FileKind,
    KindDefaults,
    StatCheck,
    checked_stat,
    list_files,
    new_block,
    one_listing,
    scope_widening,
    unreadable,
)
from corpus_index.kinds.beir import BEIR
from corpus_index.kinds.documents import DOCUMENTS
from corpus_index.kinds.messages import MESSAGES
from corpus_index.kinds.profiles import PROFILES
from corpus_index.kinds.uw_deals import UW_DEALS
from corpus_index.linked.groups import GROUP_TYPES
from corpus_index.records import Block, SourceDoc, StreamCarry

if TYPE_CHECKING:
    from corpus_index.collection import CollectionConfig

__all__ = [
    "KINDS",
    "PROMOTED_COLUMNS",
    "MISSING",
    "UNREADABLE",
    "CollectionKind",
    "FileKind",
    "KindDefaults",
    "StatCheck",
    "checked_stat",
    "excerpt_of",
    "fingerprint",
    "kind_named",
    "kind_of",
    "list_documents",
    "list_files",
    "load_document",
    "load_documents",
    "new_block",
    "one_listing",
    "parse_document",
    "read_documents",
    "register",
    "registered_values",
    "scope_widening",
    "unit_granularity",
    "unreadable",
    "unregister",
]

KINDS: dict[str, CollectionKind] = {
    UW_DEALS.name: UW_DEALS,
    BEIR.name: BEIR,
    MESSAGES.name: MESSAGES,
    DOCUMENTS.name: DOCUMENTS,
    PROFILES.name: PROFILES,
}


def _union(kinds: Mapping[str, CollectionKind]) -> tuple[tuple[str, pa.DataType], ...]:
    columns: dict[str, pa.DataType] = {}
    for kind in kinds.values():
        for name, type_ in kind.promoted_columns:
            if columns.setdefault(name, type_) != type_:
                raise ConfigError(
                    f"kind {kind.name!r} promotes {name!r} as {type_}, another kind as "
                    f"{columns[name]}; a promoted column has one type"
                )
    return tuple(columns.items())


# The promoted filter columns of every generation table: the union over the kinds listed above.
# It is fixed when this module loads, because a generation's schema never changes.
PROMOTED_COLUMNS: tuple[tuple[str, pa.DataType], ...] = _union(KINDS)


def register(kind: CollectionKind) -> None:
    """Make ``kind`` available under its name (for a kind that lives outside this package).

    Raises:
        ConfigError: the name is taken, or the kind promotes a column that the generation
            schema lacks (a kind with new filter columns is listed in ``KINDS`` itself).
    """
    if kind.name in KINDS:
        raise ConfigError(f"collection kind {kind.name!r} is already registered")
    known = dict(PROMOTED_COLUMNS)
    extra = [name for name, type_ in kind.promoted_columns if known.get(name) != type_]
    if extra:
        raise ConfigError(
            f"kind {kind.name!r} promotes {', '.join(extra)}, which generation tables lack; "
            "list the kind in corpus_index.kinds.KINDS so its columns join the schema"
        )
    KINDS[kind.name] = kind


def unregister(name: str) -> None:
    """Forget the kind registered as ``name`` (a no-op when there is none)."""
    KINDS.pop(name, None)


def kind_named(name: str, *, collection: str | None = None) -> CollectionKind:
    """The kind registered as ``name``.

    Raises:
        ConfigError: no such kind; the message names the collection when given.
    """
    kind = KINDS.get(name)
    if kind is None:
        where = f"collections.{collection}.kind" if collection else "kind"
        raise ConfigError(
            f"{where}: unknown collection kind {name!r} (known: {', '.join(sorted(KINDS))})"
        )
    return kind


def kind_of(collection: CollectionConfig) -> CollectionKind:
    """The kind of ``collection``.

    Raises:
        ConfigError: the collection names a kind that is not registered.
    """
    return kind_named(collection.kind, collection=collection.name)


def read_documents(
    collection: CollectionConfig,
    *,
    owners: Mapping[str, str] | None = None,
    carry: StreamCarry | None = None,
) -> Iterator[SourceDoc]:
    """Every document under the collection's root, in a stable order; ``owners`` (doc_id ->
    the path the last scan found it at) settles which of two records sharing an id keeps it,
    for kinds whose records share files; ``carry``: the files of such a kind that a scan lists
    from its last reading, and where the kind notes those it may list so next time (see
    :class:`~corpus_index.records.StreamCarry`; a kind that does not note any reads every
    file each time)."""
    return kind_of(collection).read_documents(collection, owners=owners, carry=carry)


def list_documents(collection: CollectionConfig) -> list[tuple[str, str]] | None:
    """``(doc_id, path)`` of every document without reading any, or None for kinds with many
    records per file (read whole instead)."""
    return kind_of(collection).list_documents(collection)


def refused_documents(
    collection: CollectionConfig, listing: Sequence[tuple[str, str]]
) -> dict[str, str]:
    """The documents of ``listing`` (:func:`list_documents`) its kind refuses for what they are
    beside the others (an irc log with another's file name), each with why."""
    return kind_of(collection).refused(collection, listing)


def load_document(collection: CollectionConfig, doc_id: str, path: str) -> SourceDoc:
    """One document of a kind that lists its documents, read now.

    Raises:
        UnreadableDocumentError, LimitExceededError: the document may not or cannot be read.
        OSError: it cannot be opened (FileNotFoundError when it is gone).
    """
    return kind_of(collection).load_document(collection, doc_id, path)


def load_documents(
    collection: CollectionConfig,
    paths: Mapping[str, str],
    *,
    owners: Mapping[str, str] | None = None,
) -> Iterator[SourceDoc]:
    """The documents named in ``paths`` (doc_id -> path, as a manifest records them), in doc_id
    order, one at a time; ``owners``: every live document's path in that manifest (records
    sharing files are named as the scan named them; ``paths`` by default)."""
    return kind_of(collection).load_documents(collection, paths, owners=owners)


def parse_document(collection: CollectionConfig, doc: SourceDoc, version: str) -> list[Block]:
    """Blocks of one document.

    Raises:
        ParseError: the document is malformed; the message names the file and line.
    """
    return kind_of(collection).parse(collection, doc, version)


# the fingerprint of a collection whose root, or a folder in it, cannot be listed: then its errno
UNREADABLE = "unreadable:"
# the fingerprint of a collection whose root does not exist or is not a folder
MISSING = "missing"


def fingerprint(
    collection: CollectionConfig, *, also: Sequence[Path] = (), rule: bytes = b""
) -> str:
    """A cheap digest of the collection's files (relative path, size, mtime in ns), read with
    ``stat`` only, and of its configuration: it changes when a document is added, changed or
    removed, when one of ``also`` (files outside the collection that its sync reads, such as
    merges recorded in the home) appears, changes or goes, when ``corpus.yaml`` changes
    the collection (its ACL groups narrowed, its limits or processing), and when ``rule``
    changes: what its ingest reads from the rest of the configuration
    (``embedding.config_input_rule``: the section registry, the profiles' input formats),
    which a fingerprint compared with the one its last ingest recorded passes. A missing root
    fingerprints as ``missing``; one that cannot be listed (a folder of it unreadable: EACCES
    on an NFS export with root squash, a permission change) as ``unreadable:<errno>``."""
    if not collection.path.is_dir():
        return MISSING
    try:
        files = kind_of(collection).fingerprint_files(collection)
    except OSError as e:
        return f"{UNREADABLE}{e.errno}" if collection.path.is_dir() else MISSING
    files = [*files, *((f"+{i}", str(p)) for i, p in enumerate(also))]
    digest = hashlib.sha256()
    digest.update(f"config\0{collection!r}\n".encode())
    digest.update(b"rule\0" + rule + b"\n")
    for rel, path in files:
        try:
            stat = os.stat(path)
        except OSError:  # removed between the listing and the stat, a symlink loop, or absent
            continue
        digest.update(f"{rel}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return f"{len(files) - len(also)}:{digest.hexdigest()[:24]}"


def registered_values() -> dict[str, list[str]]:
    """What the registry allows today, by the names a data-quality suite uses for them
    (``{"$PARAMETER": "registered_kinds"}``): kind names and their blocks' source types, and
    when a kind is grouped, ``group`` and the group types its groups' rows carry."""
    types = {t for k in KINDS.values() for t in k.source_types}
    if any(k.grouped for k in KINDS.values()):  # their groups are rows of kind ``group``
        return {
            "registered_kinds": sorted([*KINDS, GROUP_KIND]),
            "registered_source_types": sorted(types | set(GROUP_TYPES)),
        }
    return {"registered_kinds": sorted(KINDS), "registered_source_types": sorted(types)}


def unit_granularity(kind: str, section: str, sections: Mapping[str, str]) -> str | None:
    """How a block of ``kind`` in ``section`` is embedded (``block`` or ``paragraph``), or None
    when it is not (given the configured section registry)."""
    return kind_named(kind).granularity(section, sections)


def excerpt_of(row: Mapping[str, Any]) -> str:
    """A hit's excerpt as its kind renders it from the row's ``text`` and ``section``; a row of
    a kind no longer registered shows its stored text."""
    text = str(row.get("text") or "")
    kind = KINDS.get(str(row.get("kind") or ""))
    if kind is None:
        return " ".join(text.split())
    return kind.excerpt(text, section=str(row.get("section") or ""))
