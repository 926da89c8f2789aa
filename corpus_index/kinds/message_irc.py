"""The ``irc`` layout of the ``messages`` kind: irc-disentanglement logs (``*.ascii.txt``), one
document per log, one unit per line addressed ``<file stem>:<line index>`` (from 0), so a
grouping of the collection can be scored against the corpus's gold clusters.

Chat and action lines are ``irc_chat`` units; ``===`` system lines (joins, quits, nick
changes) are ``irc_system`` units, kept so every line has its unit but never embedded. The
date comes from the file name, the time of day from the line (read as UTC; a unit's day is
its date in the collection's ``timezone`` where one is set), and both fall in the supported
years (:func:`~corpus_index.linked.messages.supported_time`); a line that starts with the
nick of someone who has spoken earlier in the log mentions them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from corpus_index.errors import ParseError
from corpus_index.kinds.base import (
    CollectionKind,
    FileKind,
    check_name,
    check_stream_lines,
    new_block,
    unreadable,
    utf8_text,
)
from corpus_index.linked import irc
from corpus_index.linked.messages import (
    LAST_YEAR,
    SUPPORTED_YEARS,
    addressed_word,
    local_day,
    supported_time,
)
from corpus_index.records import Block, SourceDoc, StreamCarry

if TYPE_CHECKING:
    from corpus_index.collection import CollectionConfig

SUFFIX = irc.SUFFIX
CHAT = "irc_chat"
SYSTEM = "irc_system"


def parse_log_blocks(
    kind: CollectionKind, collection: CollectionConfig, doc: SourceDoc, version: str
) -> list[Block]:
    """One block per line of a log.

    Raises:
        LimitExceededError: the log has more lines than ``limits.max_stream_lines``, or a
            nick longer than ``limits.max_name_chars``.
        ParseError: the file is not ASCII/UTF-8 text, its name carries no date or an invalid
            one, a nick holds a control character, or a time falls outside the supported
            years (its date, or its clock running on past midnight beyond them).
    """
    stem = doc.doc_id.rsplit("/", 1)[-1]
    problem = _date_problem(stem)
    if problem is not None:
        raise ParseError(doc.path, problem)
    check_stream_lines(collection, doc.path, doc.raw)
    messages = irc.to_messages(stem, irc.parse_log(utf8_text(doc)))
    for index, m in enumerate(messages):
        # a nick goes into the metadata and its groups' titles, as a record's author does
        check_name(doc.path, index + 1, "the nick", m.author, collection.limits)
        if not supported_time(m.timestamp):  # the date is supported: the clock ran past it
            raise ParseError(
                doc.path,
                f"the clock passes midnight into {LAST_YEAR + 1}-01-01 here (a time before "
                f"the last one is the next day), past the supported years {SUPPORTED_YEARS}",
                line=index + 1,
            )
    speakers: set[str] = set()
    blocks = []
    for index, m in enumerate(messages):
        first = addressed_word(m.text)
        mentions = [first] if not m.system and first in speakers else []
        when = dt.datetime.fromtimestamp(m.timestamp, tz=dt.UTC)
        section = SYSTEM if m.system else CHAT
        content = {"text": m.text} if m.system else {"author": m.author, "text": m.text}
        blocks.append(
            new_block(
                kind,
                collection,
                doc,
                version,
                source_type=section,
                section=section,
                block_key=f"line/{index}",
                content=content,
                line=index + 1,
                event_date=local_day(when, collection.timezone),
                metadata={
                    "unit_id": m.unit_id,
                    "source": CHAT,
                    "processing_profile": CHAT,
                    "author": m.author,
                    "recipients": [],
                    "cc": [],
                    "mentions": mentions,
                    "channel": m.channel,
                    "timestamp": when.isoformat(),
                    "location": "",
                    "system": m.system,
                    "contains_question": "?" in m.text,
                },
            )
        )
        if not m.system and m.author:
            speakers.add(m.author.lower())
    return blocks


def _date_problem(stem: str) -> str | None:
    """What is wrong with the date a log's file stem starts with; None when it is a supported
    day."""
    named = irc.named_date(stem)
    if named is None:
        return "an irc log's file name starts with its date (2004-11-15_03.ascii.txt)"
    day = irc.log_date(stem)
    if day is None:
        return f"{named}, the date the file name starts with, is not a valid date (YYYY-MM-DD)"
    if not supported_time(day.timestamp()):
        return (
            f"{named}, the date the file name starts with, is outside the supported years "
            f"{SUPPORTED_YEARS}"
        )
    return None


class IrcLayout(FileKind):
    """Reads like a file kind (one log per document, listed by suffix, bounded by
    ``limits.max_document_bytes``); its parse takes the kind its blocks belong to. Of two logs
    with one file name in different folders, the first in path order is read and the other
    refused (:meth:`refused`): their lines' unit ids would be the same."""

    suffix = SUFFIX

    def refused(
        self, collection: CollectionConfig, listing: Sequence[tuple[str, str]]
    ) -> dict[str, str]:
        """Each log whose file name an earlier log of ``listing`` has, with why."""
        first: dict[str, str] = {}
        out: dict[str, str] = {}
        for doc_id, _path in listing:
            stem = doc_id.rsplit("/", 1)[-1]
            if stem in first:
                out[doc_id] = (
                    f"another log, {first[stem]}{SUFFIX}, has the same file name: their lines' "
                    f"unit ids (<file stem>:<line>) would be the same; rename or move one"
                )
            else:
                first[stem] = doc_id
        return out

    def read_documents(
        self,
        collection: CollectionConfig,
        *,
        owners: Mapping[str, str] | None = None,
        carry: StreamCarry | None = None,
    ) -> Iterator[SourceDoc]:
        """Every log, a refused one (:meth:`refused`) as unreadable, with why."""
        refused = self.refused(collection, self.list_documents(collection))
        for doc in super().read_documents(collection, owners=owners):
            yield _refusing(doc, refused)

    def load_documents(
        self,
        collection: CollectionConfig,
        paths: Mapping[str, str],
        *,
        owners: Mapping[str, str] | None = None,
    ) -> Iterator[SourceDoc]:
        """The named logs, a refused one (:meth:`refused`) as unreadable, with why."""
        refused = self.refused(collection, self.list_documents(collection))
        for doc in super().load_documents(collection, paths, owners=owners):
            yield _refusing(doc, refused)

    def parse(
        self, kind: CollectionKind, collection: CollectionConfig, doc: SourceDoc, version: str
    ) -> list[Block]:
        """See :func:`parse_log_blocks`."""
        return parse_log_blocks(kind, collection, doc, version)


def _refusing(doc: SourceDoc, refused: Mapping[str, str]) -> SourceDoc:
    """``doc``, or it as unreadable with why when ``refused`` names it."""
    if doc.error is not None or doc.doc_id not in refused:
        return doc
    return unreadable(doc.doc_id, doc.path, ParseError(doc.path, refused[doc.doc_id]))
