"""The collection-kind protocol, and defaults a kind module builds on.

A collection kind says everything the pipeline needs to know about one layout of source
documents. The steps never ask which kind they hold; they ask the kind (DESIGN §3).
"""

from __future__ import annotations

import codecs
import contextlib
import contextvars
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

import pyarrow as pa

from corpus_index.collection import CONTROL
from corpus_index.errors import (
    ConfigError,
    LimitExceededError,
    ParseError,
    UnreadableDocumentError,
)
from corpus_index.hashing import chunk_ref, content_hash
from corpus_index.records import Block, SourceDoc, StreamCarry

if TYPE_CHECKING:
    from corpus_index.collection import CollectionConfig
    from corpus_index.limits import Limits


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
        each block's ``kind`` is the kind's ``name``, its ``source_type`` one of
        ``source_types``, and its tier starts at ``default_tier`` for that source type (a
        document may narrow it, never widen it).
        ``granularity`` says whether a block of a section is an embeddable unit and how it is
        cut (``block`` or ``paragraph``), given the configured section registry; None leaves
        the block out of the index.

    Filtering and display:
        ``promoted_columns`` are the filter columns the kind fills (their union over the
        registry is the generation schema); ``promote`` computes them from a block's
        ``metadata``. ``excerpt`` renders a hit as prose from the row's stored canonical input
        (its ``text``) and ``section``: what a person reads, not what the model read.

    Options:
        ``check_options`` validates the collection's kind-specific settings (``format``,
        ``processing``) when the configuration loads, raising ``ConfigError`` that names
        ``<key>.<setting>``.

    Capabilities:
        ``sidecars``: documents get RFC 0013 sidecars. ``writable``: ``CorpusIndex.add`` and
        ``remove`` may place and remove its documents as files (RFC 0013 underwriting files).
        ``grouped``: its units are later grouped across documents (the ``linked_groups`` step,
        DESIGN §10b). A grouped kind (``messages``) puts in each block's ``metadata`` what the
        grouping reads: ``author``, ``recipients``, ``channel``, ``timestamp`` (ISO 8601 with
        offset) and ``location``; the grouping itself (conversations, Q&A pairs, incident and
        daily contexts) is a step of its own that reads those units, and its groups are rows
        of ``kind: group`` beside them. ``flat_exports``: each profile × collection gets the
        seed's flat-blob exports per researcher (``<slug>/embeddings/``) and collection
        centroids; its blocks' ``metadata`` carry ``slug``, ``source_type``, ``chunk_index``
        and ``char_count`` (the ``profiles`` kind). ``shardable``: the collection may be split
        into hash shards (``shards: N``), each listing only the documents it owns
        (``CollectionConfig.owns``); a kind that is not says why in ``unshardable_why``.
    """

    # read-only members, so a kind may declare them as plain class attributes
    @property
    def name(self) -> str: ...

    @property
    def source_types(self) -> tuple[str, ...]: ...

    @property
    def sidecars(self) -> bool: ...

    @property
    def writable(self) -> bool: ...

    @property
    def grouped(self) -> bool: ...

    @property
    def flat_exports(self) -> bool: ...

    @property
    def shardable(self) -> bool: ...

    @property
    def unshardable_why(self) -> str: ...

    @property
    def promoted_columns(self) -> tuple[tuple[str, pa.DataType], ...]: ...

    def list_documents(self, collection: CollectionConfig) -> list[tuple[str, str]] | None: ...

    def refused(
        self, collection: CollectionConfig, listing: Sequence[tuple[str, str]]
    ) -> dict[str, str]: ...

    def read_documents(
        self,
        collection: CollectionConfig,
        *,
        owners: Mapping[str, str] | None = None,
        carry: StreamCarry | None = None,
    ) -> Iterator[SourceDoc]: ...

    def load_document(self, collection: CollectionConfig, doc_id: str, path: str) -> SourceDoc: ...

    def load_documents(
        self,
        collection: CollectionConfig,
        paths: Mapping[str, str],
        *,
        owners: Mapping[str, str] | None = None,
    ) -> Iterator[SourceDoc]: ...

    def fingerprint_files(self, collection: CollectionConfig) -> list[tuple[str, str]]: ...

    def parse(self, collection: CollectionConfig, doc: SourceDoc, version: str) -> list[Block]: ...

    def default_tier(self, collection: CollectionConfig, source_type: str) -> str: ...

    def granularity(self, section: str, sections: Mapping[str, str]) -> str | None: ...

    def promote(self, metadata: Mapping[str, Any]) -> dict[str, Any]: ...

    def excerpt(self, text: str, *, section: str) -> str: ...

    def check_options(self, collection: CollectionConfig, *, key: str) -> None: ...


class KindDefaults:
    """What most kinds do: no capabilities, every block a whole unit, the collection's tier,
    no promoted columns, the block's values as its excerpt."""

    source_types: tuple[str, ...] = ()
    sidecars = False
    writable = False
    grouped = False
    flat_exports = False
    shardable = False
    unshardable_why = "its documents are not listed one file each"
    promoted_columns: tuple[tuple[str, pa.DataType], ...] = ()

    def default_tier(self, collection: CollectionConfig, source_type: str) -> str:
        """The collection's tier, whatever the source type."""
        return collection.tier

    def refused(
        self, collection: CollectionConfig, listing: Sequence[tuple[str, str]]
    ) -> dict[str, str]:
        """Documents of ``listing`` (:meth:`list_documents`) refused for what they are beside
        the others, each with why (its path is named with it): none."""
        return {}

    def granularity(self, section: str, sections: Mapping[str, str]) -> str | None:
        """Every block is one embeddable unit."""
        return "block"

    def promote(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """No filter columns."""
        return {}

    def excerpt(self, text: str, *, section: str) -> str:
        """The block's values as prose (see :func:`prose`)."""
        return prose(text, section=section)

    def check_options(self, collection: CollectionConfig, *, key: str) -> None:
        """Refuse kind-specific settings: a kind with none takes neither ``format`` nor
        ``processing``.

        Raises:
            ConfigError: either is set.
        """
        for name, value in (("format", collection.format), ("processing", collection.processing)):
            if value:
                raise ConfigError(f"{key}.{name}: the {collection.kind} kind has no such setting")


class FileKind(KindDefaults):
    """A kind with one file per document, found by its name's ``suffix`` under the root."""

    suffix = ""
    shardable = True

    def list_documents(self, collection: CollectionConfig) -> list[tuple[str, str]]:
        """``(doc_id, path)`` of every file with the suffix (doc_id: the posix path below the
        root without the suffix) that the collection (or its shard) owns, in path order, none
        opened. Inside :func:`one_listing` the root is listed once and split among the
        collection's shards once, however many shards ask."""
        listings = _LISTINGS.get()
        if listings is None or collection.shard is None:
            return [d for d in list_files(collection.path, self.suffix) if collection.owns(d[0])]
        key = (collection.path, self.suffix, collection.name, collection.shards)
        split = listings.get(key)
        if split is None:
            split = {}
            for doc in list_files(collection.path, self.suffix):
                split.setdefault(collection.shard_for(doc[0]), []).append(doc)
            listings[key] = split
        return list(split.get(collection.shard, []))

    def load_document(self, collection: CollectionConfig, doc_id: str, path: str) -> SourceDoc:
        """One document, read now (see :func:`read_file`).

        Raises:
            UnreadableDocumentError, LimitExceededError: the file may not or cannot be read.
            FileNotFoundError: it was removed.
        """
        raw, stat = read_file(collection, path)
        return SourceDoc(doc_id=doc_id, path=path, raw=raw, size=stat.st_size, mtime=stat.st_mtime)

    def read_documents(
        self,
        collection: CollectionConfig,
        *,
        owners: Mapping[str, str] | None = None,
        carry: StreamCarry | None = None,
    ) -> Iterator[SourceDoc]:
        """Every document, in path order; one that cannot be read carries its ``error``
        (``owners`` and ``carry`` are for kinds whose records share files: a file here is
        one document)."""
        for doc_id, path in self.list_documents(collection):
            try:
                yield self.load_document(collection, doc_id, path)
            except FileNotFoundError:
                continue
            except (OSError, ParseError) as exc:
                yield unreadable(doc_id, path, exc)

    def load_documents(
        self,
        collection: CollectionConfig,
        paths: Mapping[str, str],
        *,
        owners: Mapping[str, str] | None = None,
    ) -> Iterator[SourceDoc]:
        """The named documents in doc_id order; one removed since the scan is skipped (the
        next scan records it), one that cannot be read carries its ``error`` (``owners``: as
        for :meth:`read_documents`)."""
        for doc_id in sorted(paths):
            try:
                yield self.load_document(collection, doc_id, paths[doc_id])
            except FileNotFoundError:
                continue
            except (OSError, ParseError) as exc:
                yield unreadable(doc_id, paths[doc_id], exc)

    def fingerprint_files(self, collection: CollectionConfig) -> list[tuple[str, str]]:
        """Every document file, named by its path below the root."""
        return [(doc_id + self.suffix, path) for doc_id, path in self.list_documents(collection)]


def new_block(
    kind: CollectionKind,
    collection: CollectionConfig,
    doc: SourceDoc,
    version: str,
    *,
    source_type: str,
    section: str,
    block_key: str,
    content: dict[str, Any],
    line: int,
    acl_groups: tuple[str, ...] | None = None,
    tier: str | None = None,
    event_date: str | None = None,
    metadata: dict[str, Any] | None = None,
    notes: tuple[str, ...] = (),
) -> Block:
    """A block of ``doc`` with its identity derived from content and version (content_hash,
    chunk_ref) and the collection's scope, narrowed where ``acl_groups`` or ``tier`` say so
    (``tier`` defaults to the kind's ``default_tier`` for the source type); ``notes``: what
    parsing read past in the document, reported, not stored (see :attr:`Block.notes`)."""
    return Block(
        collection=collection.name,
        doc_id=doc.doc_id,
        source_version=version,
        kind=kind.name,
        source_type=source_type,
        section=section,
        block_key=block_key,
        content=content,
        content_hash=content_hash(content),
        chunk_ref=chunk_ref(collection.name, doc.doc_id, version, block_key),
        tenant_id=collection.tenant,
        acl_groups=collection.acl_groups if acl_groups is None else acl_groups,
        tier=kind.default_tier(collection, source_type) if tier is None else tier,
        path=doc.path,
        line=line,
        event_date=event_date,
        metadata=metadata or {},
        notes=notes,
    )


def scope_widening(
    collection: CollectionConfig, *, tenant: object, acl_groups: Iterable[str], tier: object
) -> str | None:
    """Why a block of this tenant, these ACL groups and this tier lies outside the scope the
    collection's configuration gives (another tenant, a group it does not have, public where
    it is restricted); None when it lies inside. The one rule parsing refuses a record by and
    a stale block stops serving by."""
    if tenant != collection.tenant:
        return (
            f"tenant {tenant!r} differs from the collection's tenant {collection.tenant!r}; "
            "a document may narrow its scope, never move it"
        )
    wider = [g for g in acl_groups if g not in collection.acl_groups]
    if wider:
        return (
            f"acl group(s) {', '.join(map(str, wider))} are not in the collection's "
            f"acl_groups ({', '.join(collection.acl_groups)}); a document may only narrow them"
        )
    if collection.tier == "restricted" and tier == "public":
        return "tier 'public' would widen the collection's 'restricted' tier"
    return None


def narrowed_scope(
    path: str,
    collection: CollectionConfig,
    fields: Mapping[str, Any],
    default_tier: str,
    *,
    line: int,
    what: str = "front matter",
) -> tuple[tuple[str, ...], str]:
    """A document's (or record's) ACL groups and tier: the collection's, narrowed by its own
    ``acl`` and ``tier`` fields, never widened; its ``tenant``, if given, must be the
    collection's.

    Raises:
        ParseError: the fields would move or widen the scope, or are malformed (``what`` names
            where they were read, ``line`` where).
    """
    acl = fields.get("acl")
    groups = collection.acl_groups
    if acl is not None:
        acl_list = [acl] if isinstance(acl, str) else acl
        if not isinstance(acl_list, list) or not acl_list:
            raise ParseError(path, f"{what} 'acl' must be a non-empty list of groups", line=line)
        groups = tuple(str(g) for g in acl_list)
    tier = fields.get("tier", default_tier)
    if tier not in ("public", "restricted"):
        raise ParseError(
            path, f"{what} 'tier' must be public or restricted (got {tier!r})", line=line
        )
    widening = scope_widening(
        collection, tenant=fields.get("tenant", collection.tenant), acl_groups=groups, tier=tier
    )
    if widening is not None:
        raise ParseError(path, widening, line=line)
    return groups, str(tier)


# half of a UTF-16 pair on its own (JSON's "\ud800"): Python reads it into a string that no
# encoder writes, so a record's hash, tables and index would each fail on it later
LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def record_id(value: object) -> str | None:
    """A record's id field as its document id: a string with more than blanks, or an integer
    (``7`` is ``"7"``); None for anything else (missing, null, a list, a boolean, a number with
    a fraction, text holding a lone UTF-16 surrogate or a control character)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value)
    # a control character such as NUL cannot be a filter's value: rows of that id could never
    # be replaced or deleted
    if not text.strip() or LONE_SURROGATE.search(text) or CONTROL.search(text):
        return None
    return text


def json_depth(value: object) -> int:
    """How deep lists and objects nest in a JSON value (iteratively: no recursion limit)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in item)
    return deepest


def check_name(
    path: str,
    line: int,
    shown: str,
    value: str,
    limits: Limits,
    *,
    key: str = "max_name_chars",
    holds: str = "name",
) -> None:
    """Refuse ``value`` (``shown`` in the message: ``'author'``, ``the nick``) when it is
    longer than ``limits.<key>`` or holds a control character, which no ``holds`` (a name, a
    place, a subject) may: it would go into metadata, filters and group titles.

    Raises:
        LimitExceededError: it is over the limit, naming the file, line and limit.
        ParseError: it holds a control character.
    """
    limit = getattr(limits, key)
    if len(value) > limit:
        raise LimitExceededError(
            path,
            f"{shown} is {len(value):,} characters, over limits.{key} = {limit:,}; "
            "shorten it or raise the limit in corpus.yaml",
            line=line,
        )
    found = CONTROL.search(value)
    if found:
        raise ParseError(
            path,
            f"{shown} holds a control character ({found.group()!r}), which no {holds} may "
            "hold; remove it",
            line=line,
        )


def check_stream_lines(collection: CollectionConfig, path: str, raw: bytes) -> None:
    """Refuse a file read a unit per line (a message stream, an irc log) that holds more lines
    than ``limits.max_stream_lines``.

    Raises:
        LimitExceededError: it does, naming the file, its lines and the limit.
    """
    lines = raw.count(b"\n") + (0 if raw.endswith(b"\n") or not raw else 1)
    limit = collection.limits.max_stream_lines
    if lines > limit:
        raise LimitExceededError(
            path,
            f"{lines:,} lines, over limits.max_stream_lines = {limit:,}; split the stream into "
            "files of fewer lines, or raise the limit in corpus.yaml",
        )


def utf8_text(doc: SourceDoc) -> str:
    """The document's bytes as text, less a leading byte order mark (which some editors write
    before UTF-8 text: it is no part of the first line, such as the ``---`` of front matter).

    Raises:
        ParseError: the bytes are not UTF-8, naming the line and byte of the first that is not.
    """
    raw = doc.raw.removeprefix(codecs.BOM_UTF8)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        at = exc.start + len(doc.raw) - len(raw)
        raise ParseError(
            doc.path, f"not UTF-8 text (byte {at}); save the file as UTF-8", line=line
        ) from None


def unreadable(doc_id: str, path: str, exc: OSError | ParseError) -> SourceDoc:
    """A document that could not be read: no bytes, and the reason (the file named)."""
    if isinstance(exc, ParseError):
        reason = str(exc)
    else:
        reason = f"{path}: cannot be read: {exc.strerror or exc}; fix or remove the file"
    return SourceDoc(
        doc_id=doc_id,
        path=path,
        raw=b"",
        size=0,
        mtime=0.0,
        error=reason,
        too_large=isinstance(exc, LimitExceededError),
    )


_SPECIAL = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
}


def checked_stat(collection: CollectionConfig, path: str, *, sized: bool = True) -> os.stat_result:
    """``stat`` of a document that may be read: inside the collection root (unless the
    collection follows symlinks out of it), a regular file, and (``sized``) within the size
    limit.

    Raises:
        UnreadableDocumentError: a symlink out of the root, or not a regular file.
        LimitExceededError: the file is larger than ``limits.max_document_bytes``.
        OSError: the file cannot be stat'ed (FileNotFoundError when it is gone; a symlink loop).
    """
    return StatCheck(collection)(path, sized=sized)


class StatCheck:
    """:func:`checked_stat` for many documents of one collection (a scan): the root and each
    folder are resolved once, not once per document.

    A document that is not a symlink lies where its folder resolves to, so its real path is its
    folder's real path and its name: one ``lstat`` per document, where ``os.path.realpath``
    takes one per component of the path. A symlink is resolved whole, as before. Folders are
    remembered for the life of the object only: make one per scan.
    """

    def __init__(self, collection: CollectionConfig) -> None:
        self.collection = collection
        self._root: str | None = None
        self._folders: dict[str, str] = {}

    def __call__(self, path: str, *, sized: bool = True) -> os.stat_result:
        """``checked_stat(collection, path, sized=sized)``; raises what it raises."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            named = _unshown(path)
            if named != path and os.path.lexists(named):
                raise UnreadableDocumentError(
                    path,
                    "the file name is not UTF-8 text (its other bytes shown as \\xNN), never "
                    "read; rename the file",
                ) from None
            raise
        link = stat.S_ISLNK(st.st_mode)
        if link:
            st = os.stat(path)  # follows symlinks; a loop raises ELOOP
        if not self.collection.follow_symlinks_outside_root:
            target = self._real_path(path, link=link)
            if self._root is None:
                self._root = os.path.realpath(self.collection.path)
            root = self._root
            if target != root and not target.startswith(root.rstrip("/") + "/"):
                raise UnreadableDocumentError(
                    path,
                    f"symlink points outside the collection root (to {target}), not followed; "
                    f"move the file into the root or set collections.{self.collection.name}."
                    "follow_symlinks_outside_root: true",
                )
        _check_regular(path, st)
        if sized:
            _check_size(self.collection, path, st.st_size)
        return st

    def _real_path(self, path: str, *, link: bool) -> str:
        folder, name = os.path.split(path)
        if link or name in ("", ".", "..") or ".." in folder.split("/"):
            return os.path.realpath(path)
        real = self._folders.get(folder)
        if real is None:
            real = self._folders[folder] = os.path.realpath(folder).rstrip("/")
        return f"{real}/{name}"


def _check_regular(path: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        what = _SPECIAL.get(stat.S_IFMT(st.st_mode), "a special file")
        raise UnreadableDocumentError(
            path, f"not a regular file ({what}), never read; remove it from the collection"
        )


def _check_size(collection: CollectionConfig, path: str, size: int) -> None:
    limit = collection.limits.max_document_bytes
    if size > limit:
        raise LimitExceededError(
            path,
            f"document is {size} bytes, over limits.max_document_bytes = {limit}; split "
            "it or raise the limit in corpus.yaml",
        )


def open_checked(
    collection: CollectionConfig, path: str, *, sized: bool = True
) -> tuple[BinaryIO, os.stat_result]:
    """A document that passes :func:`checked_stat`, open for reading, and its ``stat``.

    The file is opened without blocking and checked again once open, so a file swapped for a
    FIFO (or, ``sized``, grown past the limit) after the check is still refused.
    """
    checked_stat(collection, path, sized=sized)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    fh = os.fdopen(fd, "rb")
    try:
        st = os.fstat(fh.fileno())
        _check_regular(path, st)
        if sized:
            _check_size(collection, path, st.st_size)
    except BaseException:
        fh.close()
        raise
    return fh, st


def read_file(collection: CollectionConfig, path: str) -> tuple[bytes, os.stat_result]:
    """The bytes of a document that passes :func:`checked_stat`, and its ``stat``."""
    fh, st = open_checked(collection, path)
    with fh:
        raw = fh.read(collection.limits.max_document_bytes + 1)  # it may grow meanwhile
    _check_size(collection, path, len(raw))
    return raw, st


# (root, suffix, collection, shards) -> shard -> its (doc_id, path) list, while one_listing holds
_LISTINGS: contextvars.ContextVar[
    dict[tuple[Path, str, str, int], dict[int, list[tuple[str, str]]]] | None
] = contextvars.ContextVar("corpus_index_listings", default=None)


@contextlib.contextmanager
def one_listing() -> Iterator[None]:
    """Within the block, a sharded collection's root is listed once for all its shards (what
    deciding which of N shards changed would otherwise list N times): for a moment's
    decisions only, since the listing is not taken again while the block lasts."""
    token = _LISTINGS.set({})
    try:
        yield
    finally:
        _LISTINGS.reset(token)


def list_files(root: Path, suffix: str) -> list[tuple[str, str]]:
    """``(doc_id, path)`` of every entry named ``*<suffix>`` under ``root`` but folders, in path
    order (the order of ``sorted(Path.rglob(...))``), without opening any; symlinked folders
    are not followed. Entries that are not readable documents (broken or outside symlinks,
    special files) are listed too: reading them refuses them, so they are quarantined by name.
    A name that is not UTF-8 text is listed with its other bytes shown as ``\\xNN``
    (:func:`_shown`): no file has that name, and reading it refuses it, naming it so (a name
    that cannot be written as text would fail every table and digest it reaches).

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
                elif entry.name.endswith(suffix):
                    found.append(((*parts, entry.name), entry.path))
    found.sort()
    return [("/".join(map(_shown, rel))[: -len(suffix)], _shown(path)) for rel, path in found]


# an undecodable byte as os.fsdecode keeps it (a lone surrogate), and as _shown writes it
_SURROGATE = re.compile("[\udc80-\udcff]")
_SHOWN_BYTE = re.compile(r"\\x([89a-f][0-9a-f])")


def _shown(name: str) -> str:
    """``name`` as text: itself when it is UTF-8, else with each byte that is not shown as
    ``\\xNN``."""
    if not _SURROGATE.search(name):
        return name
    return _SURROGATE.sub(lambda m: f"\\x{ord(m.group(0)) - 0xDC00:02x}", name)


def _unshown(path: str) -> str:
    """The name :func:`_shown` wrote as ``path`` (bytes ``\\x80`` to ``\\xff`` made the lone
    surrogates the file system's name holds again)."""
    return _SHOWN_BYTE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), path)


NAMING_KEYS = frozenset({"id", "name", "title", "type"})  # a value that names its item
_INDEX = re.compile(r"\[\d+\]$")
_END = (".", "!", "?", ":", "…")


def prose(text: str, *, section: str) -> str:
    """A block's canonical input (``default-v1`` or ``-v2``, whole or one paragraph) read back as
    prose: the values in source order, without their field paths, the section and context lines.

    A value of one or two words means little alone (``severity: high``), so it keeps its field
    name as a label; one that names its item (``id``, ``name``) reads as that name. A longer
    value is a sentence of its own.
    """
    lines = text.split("\n")
    if section in lines:  # the format's header (v2 puts the document's context line above it)
        lines = lines[lines.index(section) + 1 :]
    return " ".join(_sentence(line) for line in lines if line.strip())


def _sentence(line: str) -> str:
    path, sep, value = line.partition(": ")
    if not sep:
        return _ended(line.strip())
    value = value.strip()
    leaf = _INDEX.sub("", path.rsplit(".", 1)[-1])
    if len(value.split()) > 2:
        return _ended(value)
    words = value.replace("_", " ")
    if leaf in NAMING_KEYS:
        return _ended(words[:1].upper() + words[1:])
    return _ended(f"{leaf.replace('_', ' ').capitalize()}: {words}")


def _ended(text: str) -> str:
    return text if not text or text.endswith(_END) else f"{text}."
