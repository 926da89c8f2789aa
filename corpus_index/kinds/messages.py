"""The ``messages`` kind: message streams whose units are later grouped into conversations,
Q&A pairs and incident contexts (DESIGN §3, §10b).

Two layouts, chosen by the collection's ``format``:

- ``jsonl`` (the default): ``*.jsonl`` files under the root, one record a line with ``id``,
  ``source``, ``channel`` (or ``thread``), ``author``, ``recipients`` and ``cc`` (lists of
  strings, a name each), ``timestamp`` (ISO 8601 with offset), ``location``, ``text`` and
  optional ``reply_to``, ``subject``, ``title``, ``version``, ``acl``, ``tier``, ``tenant``.
  Each record is a document of its own (``doc_id`` its ``id``: a non-blank string, or an
  integer read as its digits), so a bad record is quarantined with its file and line while
  the rest of the file is indexed. A record may
  narrow the collection's ACL groups, never widen them. Times fall in the years 1900 to 9998
  UTC (:func:`~corpus_index.linked.messages.supported_moment`), so every later step can turn
  them back into dates. A record's day (its ``event_date``, the day it is grouped by) is its
  date in its own offset, or in the collection's ``timezone`` where one is set
  (:func:`~corpus_index.linked.messages.local_day`).
  Each source is cleaned and cut by its processing profile (:mod:`message_profiles`).
- ``irc``: the irc-disentanglement logs (:mod:`message_irc`), one unit per line.

Every block's ``metadata`` holds what grouping reads: ``unit_id``, ``author``, ``recipients``,
``cc``, ``mentions``, ``channel``, ``timestamp``, ``location``, ``reply_to``; see
:func:`message_of`.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import re
import reprlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from corpus_index.collection import CONTROL
from corpus_index.errors import ConfigError, LimitExceededError, ParseError
from corpus_index.kinds import message_irc, message_profiles
from corpus_index.kinds.base import (
    LONE_SURROGATE,
    CollectionKind,
    KindDefaults,
    check_name,
    check_stream_lines,
    json_depth,
    list_files,
    narrowed_scope,
    new_block,
    prose,
    read_file,
    record_id,
    unreadable,
)
from corpus_index.kinds.message_profiles import PROFILES, ProcessingProfile, profiles_with
from corpus_index.linked.messages import (
    SUPPORTED_YEARS,
    Message,
    local_day,
    supported_moment,
    thread_subject,
)
from corpus_index.linked.records import GROUP_ID_PREFIX
from corpus_index.records import Block, SourceDoc, StreamCarry, StreamFile

if TYPE_CHECKING:
    from corpus_index.collection import CollectionConfig
    from corpus_index.limits import Limits

SUFFIX = ".jsonl"
_OPTIONAL_TEXT = ("location", "reply_to", "subject", "title", "version")
_SUBJECTS = ("subject", "title")  # bounded by limits.max_subject_chars, the rest by max_name_chars
# the keys a record's fields are read from (see the module's docstring); any other is read past
# and noted (real exports carry extra fields; a typo such as 'recipents' would vanish unseen)
KEYS = frozenset(
    ("id", "source", "channel", "thread", "author", "recipients", "cc", "timestamp")
    + ("location", "text", "reply_to", "subject", "title", "version", "acl", "tier", "tenant")
)
# notes naming a record's unknown keys, at most: an export with dozens of extra fields gets a
# few named and a count, not a note for each on every record
MAX_KEY_NOTES = 5


# -- reading: one document per record ---------------------------------------------------------


def read_records(
    collection: CollectionConfig,
    *,
    owners: Mapping[str, str] | None = None,
    only: Collection[str] | None = None,
    carry: StreamCarry | None = None,
) -> Iterator[SourceDoc]:
    """One document per non-blank line of every ``*.jsonl`` file: the records with their own
    ids in path then line order, then those named by their place.

    A file that may not or cannot be read, or holds more lines than
    ``limits.max_stream_lines``, is one unreadable document named by its path; a
    record without a valid ``id`` (see :func:`id_of`) is named ``<file>:<line>``, and one that
    repeats an id already read is named ``<id>@<file>:<line>``: both are quarantined by
    parsing. Of two records with one id, the one in the file the id was last found in
    (``owners``: id -> that file's path, from the last scan) keeps it, wherever the other's
    file sorts; with no owner, or none left there, the first read does (unless that file has
    a line that cannot be read, which may be the record: its id is then held, see
    :func:`corpus_index.sources.scan_manifest`). A place's name gives
    way to a record whose own id it is (``#2`` and on are added to it), so no file's bad line
    stops another record, or the collection, by taking its id.

    ``only``: the paths of the files to read (the others are passed over). The records are
    then named from those files alone: as a reading of every file names them only where no
    record of another file bears on their names (see :meth:`JsonlLayout.load_documents`).

    ``carry``: the files a scan found as the last scan saw them, whose records are listed as
    given, not read (each was named by its own id then, and is now unless a record read before
    it has taken the id: it is then named as a reading would name it), and where the files
    read whole with every record named by its own id are noted for the next scan.
    """
    owner_of = owners or {}
    unclean: set[str] = set()  # files with a record not named by its own id in its turn
    seen: dict[str, str] = {}  # id -> where the record that has it is
    waiting: dict[str, SourceDoc] = {}  # read outside its id's owner file: claims it at the end
    placed: list[SourceDoc] = []  # named by their place: after every record's own id is known
    names: dict[str, str] = {}  # a file's path -> its name below the root
    troubled: set[str] = set()  # the files with a line (or all of them) that cannot be read

    for rel, path in list_files(collection.path, SUFFIX):
        names[path] = f"{rel}{SUFFIX}"
        if only is not None and path not in only:
            continue
        if carry is not None and path in carry.unchanged:
            yield from _listed(path, f"{rel}{SUFFIX}", carry, seen, waiting, placed)
            continue
        try:
            raw, stat = read_file(collection, path)
            check_stream_lines(collection, path, raw)
        except FileNotFoundError:
            continue
        except (OSError, ParseError) as exc:
            placed.append(unreadable(f"{rel}{SUFFIX}", path, exc))
            troubled.add(path)
            continue
        own: list[int] = []  # the lines of the records named by their own ids in their turn
        for n, line in enumerate(raw.split(b"\n"), start=1):
            line = line.rstrip(b"\r")
            if not line.strip():
                continue
            where = f"{rel}{SUFFIX}:{n}"
            doc = SourceDoc(
                doc_id=where, path=path, raw=line, size=len(line), mtime=stat.st_mtime, line=n
            )
            doc_id = _record_id(line, collection.limits.max_name_chars)
            if doc_id is None:
                placed.append(replace(doc, unnamed=True))
                troubled.add(path)
            elif doc_id in seen:
                placed.append(_repeat(doc, doc_id, seen[doc_id]))
                unclean.add(path)
            elif doc_id in waiting and owner_of.get(doc_id) != path:
                placed.append(_repeat(doc, doc_id, waiting[doc_id].doc_id))
                unclean.add(path)
            elif owner_of.get(doc_id, path) != path:
                waiting[doc_id] = doc  # its id's file may still hold the record that owns it
                unclean.add(path)
            else:
                if doc_id in waiting:  # the owner's record: the one read first repeats it
                    placed.append(_repeat(waiting.pop(doc_id), doc_id, where))
                seen[doc_id] = where
                own.append(n)
                yield replace(doc, doc_id=doc_id)
        if carry is not None and path not in unclean and path not in troubled:
            carry.seen[path] = StreamFile.seen(stat, own)
    for doc_id, doc in waiting.items():
        owner = owner_of[doc_id]
        # the line it may be cannot be read: the id's record is held (unless the id was only a
        # bad line's place name there, which names no record)
        if owner in troubled and not _place_name(doc_id, names.get(owner, owner)):
            of = f"a record of {names.get(owner, owner)}, which has a line that cannot be read"
            placed.append(_repeat(doc, doc_id, of))
        else:  # its owner's file holds it no more: the first read claims it
            seen[doc_id] = doc.doc_id
            yield replace(doc, doc_id=doc_id)
    for doc in placed:
        name, k = doc.doc_id, 1
        while name in seen:
            k += 1
            name = f"{doc.doc_id}#{k}"
        seen[name] = name
        yield doc if name == doc.doc_id else replace(doc, doc_id=name)


def _repeat(doc: SourceDoc, doc_id: str, of: str) -> SourceDoc:
    """``doc`` (named by its place) as a repeat of ``doc_id``, whose record is at ``of``."""
    error = f"{doc.path}:{doc.line}: id repeats {of}; ids are unique in a collection"
    return replace(doc, doc_id=f"{doc_id}@{doc.doc_id}", raw=b"", error=error)


def _listed(
    path: str,
    name: str,
    carry: StreamCarry,
    seen: dict[str, str],
    waiting: dict[str, SourceDoc],
    placed: list[SourceDoc],
) -> Iterator[SourceDoc]:
    """The records of a file :func:`read_records` lists from ``carry.unchanged`` (what the
    last scan saw of it, and its records then, each named by its own id, which owns it), named
    as a reading of the file would name them now: by their ids, an earlier file's record
    waiting for one giving way; or by place, as repeats, where a record read before holds the
    id (and the file is then not noted as clean in ``carry.seen``)."""
    file, docs = carry.unchanged[path]
    clean = True
    for doc in docs:
        doc_id, where = doc.doc_id, f"{name}:{doc.line}"
        if doc_id in seen:
            placed.append(_repeat(replace(doc, doc_id=where, sha256=None), doc_id, seen[doc_id]))
            clean = False
            continue
        if doc_id in waiting:  # the owner's record: the one read first repeats it
            placed.append(_repeat(waiting.pop(doc_id), doc_id, where))
        seen[doc_id] = where
        yield doc
    if clean:
        carry.seen[path] = file


def _place_name(doc_id: str, file_name: str) -> bool:
    """Whether ``doc_id`` is a name :func:`read_records` gives by place in ``file_name``
    (``<file>:<line>``, ``<id>@<file>:<line>``, with ``#k`` where it gave way)."""
    return re.fullmatch(rf"(?:.*@)?{re.escape(file_name)}:\d+(?:#\d+)?", doc_id) is not None


def _record_id(line: bytes, max_chars: int) -> str | None:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return id_of(record, max_chars=max_chars) if isinstance(record, dict) else None


def id_of(record: Mapping[str, Any], *, max_chars: int | None = None) -> str | None:
    """A record's ``id`` as its document id: a string with more than blanks, or an integer
    (``7`` is ``"7"``); None for anything else (missing, blank, a list, a boolean, a number
    with a fraction, text that is not UTF-8 encodable, a control character such as NUL, the
    prefix of linked groups' ids, see :func:`id_problem`, or more than ``max_chars``
    characters, ``limits.max_name_chars``)."""
    text = record_id(record.get("id"))
    if text is None or id_problem(text):
        return None
    return None if max_chars is not None and len(text) > max_chars else text


def id_problem(text: str) -> str | None:
    """Why ``text`` may not be a unit's id although it is a string: a control character (a NUL
    cannot be a filter's value, so its rows could never be replaced or deleted), or the prefix
    of the linked groups' ids, which share the collection's source ids (a unit of that id
    would take a group's rows, and its deletion the group's); None when it may."""
    if CONTROL.search(text):
        return "'id' holds a control character"
    if text.startswith(GROUP_ID_PREFIX):
        return f"'id' starts with {GROUP_ID_PREFIX!r}, which names linked groups"
    return None


# -- parsing a record -------------------------------------------------------------------------


def parse_record(
    collection: CollectionConfig,
    doc: SourceDoc,
    version: str,
    profiles: Mapping[str, ProcessingProfile],
) -> list[Block]:
    """The block(s) of one record, cleaned and structured by its source's profile.

    Raises:
        ParseError: the record is malformed, names an unknown source, lacks a field, would
            widen the collection's scope, or its id, author, a recipient or cc, channel,
            location, reply_to, version, subject or title holds a control character (NUL,
            ESC, a newline); the message names the file and line.
        LimitExceededError: it nests deeper than ``limits.max_nesting_depth``, names more
            recipients and cc than ``limits.max_record_people``, or has one of those fields
            longer than ``limits.max_name_chars`` (``limits.max_subject_chars`` for a subject
            or title).

    A key the record's fields are not read from (not in :data:`KEYS`) is read past and noted
    on its first block (:attr:`~corpus_index.records.Block.notes`), a few notes at most (see
    :func:`_unknown_keys`).
    """
    line = doc.line or 1
    record = _load(doc, collection, line)
    unit_id = id_of(record)
    if unit_id is None:
        rid = record.get("id")
        if "id" not in record:
            problem = "missing 'id'"
        elif isinstance(rid, str) and rid.strip() and (why := id_problem(rid)):
            problem = why
        else:
            problem = f"'id' must be a non-blank string or an integer (got {reprlib.repr(rid)})"
        raise ParseError(doc.path, f"{problem}; every record has its own id", line=line)
    _check_bounded(doc.path, line, "id", unit_id, collection.limits)  # a valid id, its length
    source = record.get("source")
    if not isinstance(source, str) or source not in profiles or source == message_irc.CHAT:
        known = ", ".join(s for s in profiles if s != message_irc.CHAT)
        raise ParseError(doc.path, f"'source' must be one of {known} (got {source!r})", line=line)
    profile = profiles[source]
    fields = _fields(doc.path, record, line, profile, collection.limits)
    named = len(fields["recipients"]) + len(fields["cc"])
    if named > collection.limits.max_record_people:
        raise LimitExceededError(
            doc.path,
            f"names {named} recipients and cc, over limits.max_record_people = "
            f"{collection.limits.max_record_people}; name a list address instead, or raise "
            "the limit in corpus.yaml",
            line=line,
        )
    groups, tier = narrowed_scope(
        doc.path,
        collection,
        record,
        MESSAGES.default_tier(collection, source),
        line=line,
        what="record",
    )
    metadata = _metadata(fields, profile, source, unit_id)
    event_date = local_day(fields["when"], collection.timezone)
    notes = _unknown_keys(record.keys() - KEYS)
    blocks: list[Block] = []
    for key, content in _contents(fields, profile):
        blocks.append(
            new_block(
                MESSAGES,
                collection,
                doc,
                version,
                source_type=source,
                section=source,
                block_key=key,
                content=content,
                line=line,
                acl_groups=groups,
                tier=tier,
                event_date=event_date,
                metadata=metadata,
                notes=() if blocks else notes,  # the record's, once
            )
        )
    return blocks


def _unknown_keys(keys: Collection[str]) -> tuple[str, ...]:
    """The notes on a record's ``keys`` that no field is read from: first one for each key
    close to a key read (a typo: ``'recipents'``, did you mean ``'recipients'``?), at most
    :data:`MAX_KEY_NOTES` of them, then one naming the rest (at most :data:`MAX_KEY_NOTES`
    by name, in key order, and how many more) beside the keys read."""
    typos: list[str] = []
    others: list[str] = []
    for key in sorted(keys):
        near = difflib.get_close_matches(key.lower(), KEYS, n=1, cutoff=_TYPO)
        if near and len(typos) < MAX_KEY_NOTES:
            typos.append(f"unknown key {reprlib.repr(key)} is not read; did you mean {near[0]!r}?")
        else:
            others.append(reprlib.repr(key))
    if not others:
        return tuple(typos)
    more = len(others) - MAX_KEY_NOTES
    names = ", ".join(others[:MAX_KEY_NOTES]) + (f" and {more} more" if more > 0 else "")
    these = f"key {names} is" if len(others) == 1 else f"keys {names} are"
    return (*typos, f"unknown {these} not read; the keys read: {', '.join(sorted(KEYS))}")


# close enough to a key read for a typo ('recipents', 'auther', 'Cc'), not another field ('bcc')
_TYPO = 0.82


class _KeyGivenTwice(ValueError):
    """A JSON object of a record gives one key twice."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict, refusing a key given twice (JSON keeps the last)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                # shown escaped where it holds a lone surrogate, so the message is text
                raise _KeyGivenTwice(ascii(key) if LONE_SURROGATE.search(key) else repr(key))
            seen.add(key)
    return out


def _load(doc: SourceDoc, collection: CollectionConfig, line: int) -> dict[str, Any]:
    depth = collection.limits.max_nesting_depth
    try:
        record = json.loads(doc.raw, object_pairs_hook=_unique_keys)
    except _KeyGivenTwice as exc:
        raise ParseError(
            doc.path,
            f"{exc} is given twice in one object; JSON would keep the last, losing the first: "
            "give each key once",
            line=line,
        ) from None
    except ValueError as exc:
        raise ParseError(doc.path, f"not valid JSON: {exc}", line=line) from None
    except RecursionError:  # nested deeper than Python parses: over any depth limit
        record = None
    if record is None or json_depth(record) > depth:
        raise LimitExceededError(
            doc.path, f"record nested deeper than limits.max_nesting_depth = {depth}", line=line
        )
    if not isinstance(record, dict):
        raise ParseError(doc.path, "a record must be a JSON object", line=line)
    where = _surrogate_in(record, "")
    if where is not None:
        raise ParseError(
            doc.path,
            f"{where} holds a lone UTF-16 surrogate (an escape from \\ud800 to \\udfff "
            "without its pair), which is not text; write the character itself",
            line=line,
        )
    return record


def _surrogate_in(value: object, path: str) -> str | None:
    """Where in ``value`` (``'text'``, ``'acl'[1]``, ``a key of 'meta'``) a string holds a
    lone surrogate, or None; names are shown escaped, so the message itself is text."""
    if isinstance(value, str):
        return path if LONE_SURROGATE.search(value) else None
    items: list[tuple[str, object]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if LONE_SURROGATE.search(key):
                return f"a key of {path}" if path else "a key of the record"
            items.append((f"{path}[{ascii(key)}]" if path else ascii(key), item))
    elif isinstance(value, list):
        items = [(f"{path}[{k}]", item) for k, item in enumerate(value)]
    for inner, item in items:
        found = _surrogate_in(item, inner)
        if found is not None:
            return found
    return None


def _check_bounded(path: str, line: int, where: str, value: str, limits: Limits) -> None:
    """Refuse ``value``, the record's ``where`` (``author``, ``cc[1]``), when it is longer
    than its limit (``limits.max_subject_chars`` for a subject or title, else
    ``limits.max_name_chars``) or holds a control character (:func:`check_name`)."""
    key = "max_subject_chars" if where in _SUBJECTS else "max_name_chars"
    name, sep, index = where.partition("[")
    shown = f"'{name}'{sep}{index}"
    check_name(path, line, shown, value, limits, key=key, holds="name, place or subject")


def _fields(
    path: str, record: dict[str, Any], line: int, profile: ProcessingProfile, limits: Limits
) -> dict[str, Any]:
    """The record's fields, checked: strings where strings belong, lists of names, a time,
    each name, place and subject within its limit and free of control characters."""

    def text(name: str, *, required: bool) -> str:
        value = record.get(name)
        if value is None and not required:
            return ""
        if not isinstance(value, str) or (required and not value.strip()):
            raise ParseError(path, f"'{name}' must be a non-empty string", line=line)
        if name != "timestamp":  # read as a time: one that is not is refused below
            _check_bounded(path, line, name, value, limits)
        return value

    def names(name: str) -> list[str]:
        value = record.get(name) or []  # absent, null or blank: no one
        if isinstance(value, str):  # "Mike, Jane" is not a person: a list names each one
            raise ParseError(
                path,
                f"'{name}' must be a list of strings, one name each (got the string "
                f'{reprlib.repr(value)}); write a list, a string per person: ["Mike", "Jane"]',
                line=line,
            )
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ParseError(path, f"'{name}' must be a list of strings, one name each", line=line)
        for k, v in enumerate(value):
            _check_bounded(path, line, f"{name}[{k}]", v, limits)
        return [v.strip() for v in value if v.strip()]

    stamp = text("timestamp", required=True)
    try:
        when = dt.datetime.fromisoformat(stamp)
    except ValueError:
        raise ParseError(
            path, f"'timestamp' is not ISO 8601: {reprlib.repr(stamp)}", line=line
        ) from None
    if when.utcoffset() is None:
        raise ParseError(path, f"'timestamp' {stamp!r} lacks a UTC offset (+10:00, Z)", line=line)
    if not supported_moment(when):
        raise ParseError(
            path,
            f"'timestamp' {stamp!r} is outside the supported years {SUPPORTED_YEARS}",
            line=line,
        )
    body = record.get("text")
    if not isinstance(body, str):
        raise ParseError(path, "'text' must be a string", line=line)
    if type(record.get("reply_to")) is int:  # an integer id, as a record's own may be
        record = {**record, "reply_to": str(record["reply_to"])}
    fields: dict[str, Any] = {name: text(name, required=False) for name in _OPTIONAL_TEXT}
    fields.update(
        author=text("author", required=True),
        recipients=names("recipients"),
        cc=names("cc"),
        when=when,
        text=_cleaned(body, profile),
        channel=_channel(path, record, line, limits),
    )
    if not fields["version"] and profile.version_from_text:
        fields["version"] = message_profiles.text_version(fields["text"])
    if not fields["channel"]:
        fields["channel"] = _thread(fields, profile)
        if not fields["channel"]:
            raise ParseError(path, "record lacks 'channel' (or 'thread')", line=line)
    return fields


def _channel(path: str, record: dict[str, Any], line: int, limits: Limits) -> str:
    """The record's ``channel`` (else its ``thread``), stripped; "" when it names neither. One
    named blank is refused: its messages would be grouped in a channel no one named."""
    for name in ("channel", "thread"):
        value = record.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ParseError(path, f"'{name}' must be a non-empty string", line=line)
        if not value.strip():
            raise ParseError(path, f"'{name}' is blank", line=line)
        _check_bounded(path, line, name, value, limits)
        return value.strip()
    return ""


def _cleaned(text: str, profile: ProcessingProfile) -> str:
    if profile.strip_quotes:
        text = message_profiles.strip_quotes(text)
    if profile.strip_signature:
        text = message_profiles.strip_signature(text)
    return text.strip()


def _thread(fields: dict[str, Any], profile: ProcessingProfile) -> str:
    """A channel for a record that names none: its set of people (SMS), or its subject
    without ``Re:``/``Fwd:`` (e-mail)."""
    if profile.thread_by_participants:
        people = sorted({p.lower() for p in [fields["author"], *fields["recipients"]]})
        return "people:" + ",".join(people)
    subject, _ = thread_subject(str(fields["subject"]))
    return f"subject:{subject}" if subject else ""


def _metadata(
    fields: dict[str, Any], profile: ProcessingProfile, source: str, unit_id: str
) -> dict[str, Any]:
    mentions = list(fields["cc"]) if profile.cc_as_mentioned else []
    meta: dict[str, Any] = {
        "unit_id": unit_id,
        "source": source,
        "processing_profile": profile.name,
        "author": fields["author"],
        "recipients": fields["recipients"],
        "cc": fields["cc"],
        "mentions": mentions,
        "channel": fields["channel"],
        "timestamp": fields["when"].isoformat(),
        "location": fields["location"],
        "contains_question": "?" in fields["text"],
    }
    meta.update({k: fields[k] for k in ("reply_to", "subject", "title", "version") if fields[k]})
    return meta


def _contents(
    fields: dict[str, Any], profile: ProcessingProfile
) -> list[tuple[str, dict[str, Any]]]:
    """``(block_key, content)`` of the record's unit(s) under its profile's structure."""
    head = {k: fields[k] for k in ("author", "location", "subject", "title") if fields[k]}
    body = fields["text"]
    if profile.structure == "turns":
        turns = message_profiles.speaker_turns(
            body, default_speaker=fields["author"], skip_actions=profile.action_items
        )
        content: dict[str, Any] = {**head, "turns": turns}
        if profile.action_items:
            content["action_items"] = message_profiles.action_items(body)
        return [("message/0", content)]
    if profile.structure == "sections":
        parts = message_profiles.sections(body, by_participant=profile.by_participant)
        if profile.split_sections and len(parts) > 1:
            extra = {"version": fields["version"]} if fields["version"] else {}
            return [(f"section/{i}", {**head, **extra, **part}) for i, part in enumerate(parts)]
        return [("message/0", {**head, "sections": parts})]
    return [("message/0", {**head, "text": body})]


# -- the kind ---------------------------------------------------------------------------------


def message_of(block: Block) -> Message:
    """The grouping's view of a unit: who wrote it, where, when, to whom, and its words."""
    return message_from(block.content, block.metadata, block.doc_id, block.event_date)


def seconds_of(value: object) -> float:
    """A unit's ``timestamp`` (ISO 8601) as seconds since the epoch: the time the groupings
    read it at."""
    return dt.datetime.fromisoformat(str(value)).timestamp()


def message_from(
    content: Mapping[str, Any], meta: Mapping[str, Any], doc_id: str, event_date: str | None
) -> Message:
    """:func:`message_of` a block given as its content, metadata, document and event date
    (as a parsed-blocks row holds them, without making the block)."""
    if "text" in content:
        words = str(content["text"])
    elif "turns" in content:
        words = " ".join(f"{t['speaker']}: {t['text']}" for t in content["turns"])
    else:
        parts = content.get("sections") or [content]
        words = " ".join(_part_words(p) for p in parts)
    people = [*meta.get("recipients", []), *meta.get("mentions", [])]
    return Message(
        unit_id=str(meta.get("unit_id", doc_id)),
        channel=str(meta.get("channel", "")),
        author=str(meta.get("author", "")),
        text=words,
        timestamp=seconds_of(meta["timestamp"]),
        reply_to=meta.get("reply_to"),
        mentions=tuple(dict.fromkeys(people)),
        system=bool(meta.get("system", False)),
        source=str(meta.get("source", "")),
        location=str(meta.get("location") or ""),
        title=str(meta.get("subject") or meta.get("title") or ""),
        event_date=event_date or "",
    )


def _part_words(part: Mapping[str, Any]) -> str:
    """A section's words as its writer put them: ``heading: text`` (``John: slept well``,
    ``What happened: ...``), so a heading never runs into the words below it as one name."""
    heading, text = str(part.get("heading", "")), str(part.get("text", ""))
    return f"{heading}: {text}".strip() if heading else text.strip()


class JsonlLayout:
    """The ``jsonl`` layout: many records per file, each a document (see :func:`read_records`)."""

    suffix = SUFFIX

    def list_documents(self, collection: CollectionConfig) -> None:
        """None: records share files, so the collection is read whole."""
        return None

    def refused(
        self, collection: CollectionConfig, listing: Sequence[tuple[str, str]]
    ) -> dict[str, str]:
        """None: a record with another's id is refused as it is read (:func:`read_records`)."""
        return {}

    def read_documents(
        self,
        collection: CollectionConfig,
        *,
        owners: Mapping[str, str] | None = None,
        carry: StreamCarry | None = None,
    ) -> Iterator[SourceDoc]:
        """See :func:`read_records`."""
        return read_records(collection, owners=owners, carry=carry)

    def load_document(self, collection: CollectionConfig, doc_id: str, path: str) -> SourceDoc:
        """Refused: a record is found by reading its file (:meth:`load_documents`).

        Raises:
            ConfigError: always.
        """
        raise ConfigError(f"{path}: a message record {doc_id!r} has no file of its own")

    def load_documents(
        self,
        collection: CollectionConfig,
        paths: Mapping[str, str],
        *,
        owners: Mapping[str, str] | None = None,
    ) -> Iterator[SourceDoc]:
        """The named records in doc_id order; the files are read again, one at a time, and
        only the wanted records are kept. ``owners`` (every record's file, as the scan that
        named them found it; ``paths`` by default) names each record as that scan did.

        The files holding a wanted record are read first, alone: a record is named there as
        the whole collection names it when its id's owner is that file (an earlier file's
        record of the same id then waits for it and gives way), and one named by its place
        carries the place in its name. When every wanted record is found so, under its name
        and in its file, those are the records (a one-message sync reads one file of a
        stream collection, not every file); when one is not (a file changed since the scan, a
        name that another file's record decides), every file is read, as the scan read them.
        """
        owner_of = paths if owners is None else owners
        files = set(paths.values())
        found = {
            doc.doc_id: doc
            for doc in read_records(collection, owners=owner_of, only=files)
            if doc.doc_id in paths
        }
        if len(found) < len(paths) or any(found[d].path != p for d, p in paths.items()):
            found = {
                doc.doc_id: doc
                for doc in read_records(collection, owners=owner_of)
                if doc.doc_id in paths
            }
        return iter([found[d] for d in sorted(found)])

    def parse(
        self, kind: CollectionKind, collection: CollectionConfig, doc: SourceDoc, version: str
    ) -> list[Block]:
        """See :func:`parse_record`, under the collection's processing profiles."""
        table = profiles_with(collection.processing, key=f"collections.{collection.name}")
        return parse_record(collection, doc, version, table)


LAYOUTS: dict[str, JsonlLayout | message_irc.IrcLayout] = {
    "jsonl": JsonlLayout(),
    "irc": message_irc.IrcLayout(),
}


def layout_of(collection: CollectionConfig) -> JsonlLayout | message_irc.IrcLayout:
    """The reader of the collection's ``format`` (``jsonl`` unless it says ``irc``).

    Raises:
        ConfigError: an unknown format.
    """
    layout = LAYOUTS.get(collection.format or "jsonl")
    if layout is None:
        raise ConfigError(
            f"collections.{collection.name}.format: must be one of {', '.join(LAYOUTS)} "
            f"(got {collection.format!r})"
        )
    return layout


class Messages(KindDefaults):
    """Message streams (``jsonl``) or irc logs (``irc``): every message a unit, grouped later
    (``grouped``); irc system lines are kept as units but never embedded. Reading and parsing
    go to the collection's layout."""

    name = "messages"
    source_types = (*PROFILES, message_irc.SYSTEM)
    grouped = True
    shardable = False
    unshardable_why = "its linked groups join messages across a channel's files"

    def list_documents(self, collection: CollectionConfig) -> list[tuple[str, str]] | None:
        """irc: one document per log, listed without reading; jsonl: None (read whole)."""
        return layout_of(collection).list_documents(collection)

    def refused(
        self, collection: CollectionConfig, listing: Sequence[tuple[str, str]]
    ) -> dict[str, str]:
        """irc: a log with an earlier log's file name; jsonl: none (it lists no documents)."""
        return layout_of(collection).refused(collection, listing)

    def read_documents(
        self,
        collection: CollectionConfig,
        *,
        owners: Mapping[str, str] | None = None,
        carry: StreamCarry | None = None,
    ) -> Iterator[SourceDoc]:
        """Every document: a record per line (jsonl), or a log per file (irc)."""
        return layout_of(collection).read_documents(collection, owners=owners, carry=carry)

    def load_document(self, collection: CollectionConfig, doc_id: str, path: str) -> SourceDoc:
        """One irc log, read now (a jsonl record has no file of its own: ConfigError)."""
        return layout_of(collection).load_document(collection, doc_id, path)

    def load_documents(
        self,
        collection: CollectionConfig,
        paths: Mapping[str, str],
        *,
        owners: Mapping[str, str] | None = None,
    ) -> Iterator[SourceDoc]:
        """The named documents in doc_id order."""
        return layout_of(collection).load_documents(collection, paths, owners=owners)

    def fingerprint_files(self, collection: CollectionConfig) -> list[tuple[str, str]]:
        """The ``*.jsonl`` files (or irc logs), named by their path below the root, and the
        people and merges files the collection names (its groups read them)."""
        suffix = layout_of(collection).suffix
        files = [(rel + suffix, path) for rel, path in list_files(collection.path, suffix)]
        named = {"people:": collection.people, "merges:": collection.merges}
        return files + [(key, str(path)) for key, path in named.items() if path is not None]

    def parse(self, collection: CollectionConfig, doc: SourceDoc, version: str) -> list[Block]:
        """A record's block(s) (jsonl), or a log's line blocks (irc)."""
        return layout_of(collection).parse(self, collection, doc, version)

    def granularity(self, section: str, sections: Mapping[str, str]) -> str | None:
        """Every message is one unit; irc system lines (joins, quits) are not embedded."""
        return None if section == message_irc.SYSTEM else "block"

    def excerpt(self, text: str, *, section: str) -> str:
        """``author (location): what they wrote``, from the stored canonical input."""
        head: dict[str, str] = {}
        rest = []
        for line in text.split("\n"):
            key, sep, value = line.partition(": ")
            if sep and key in ("author", "location") and key not in head:
                head[key] = value.strip()
            else:
                rest.append(line)
        said = prose("\n".join(rest), section=section)
        who = head.get("author", "")
        if head.get("location"):
            who = f"{who} ({head['location']})" if who else head["location"]
        return f"{who}: {said}" if who else said

    def check_options(self, collection: CollectionConfig, *, key: str) -> None:
        """``format`` is ``jsonl`` or ``irc``; ``processing`` overrides profile fields of the
        ``jsonl`` format's sources.

        Raises:
            ConfigError: an unknown format, source or field, a value of the wrong type, or an
                override that would change nothing (any, for ``irc``; ``irc_chat``'s, for
                ``jsonl``).
        """
        if collection.format and collection.format not in LAYOUTS:
            raise ConfigError(
                f"{key}.format: must be one of {', '.join(LAYOUTS)} (got {collection.format!r})"
            )
        if collection.format == "irc" and collection.processing:
            raise ConfigError(
                f"{key}.processing: an irc collection's logs are read as they are (a unit per "
                "line, no profile), so these overrides would change nothing; remove them"
            )
        if message_irc.CHAT in collection.processing:
            raise ConfigError(
                f"{key}.processing.{message_irc.CHAT}: the irc format's source, which no jsonl "
                "record may name, so this override would change nothing; remove it"
            )
        profiles_with(collection.processing, key=f"{key}.processing")


MESSAGES = Messages()
