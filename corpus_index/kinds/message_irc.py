"""The ``irc`` layout of the ``messages`` kind: irc-disentanglement logs (``*.ascii.txt``), one
document per log, one unit per line addressed ``<file stem>:<line index>`` (from 0), so a
grouping of the collection can be scored against the corpus's gold clusters.

Chat and action lines are ``irc_chat`` units; ``===`` system lines (joins, quits, nick
changes) are ``irc_system`` units, kept so every line has its unit but never embedded. The
date comes from the file name, the time of day from the line, and both fall in the supported
years (:func:`~corpus_index.linked.messages.supported_time`); a line that starts with the
nick of someone who has spoken earlier in the log mentions them.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from corpus_index.errors import ParseError
from corpus_index.kinds.base import CollectionKind, FileKind, new_block
from corpus_index.linked import irc
from corpus_index.linked.messages import (
    LAST_YEAR,
    SUPPORTED_YEARS,
    addressed_word,
    supported_time,
)
from corpus_index.records import Block, SourceDoc

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
        ParseError: the file is not ASCII/UTF-8 text, its name carries no date or an invalid
            one, or a time falls outside the supported years (its date, or its clock running
            on past midnight beyond them).
    """
    stem = doc.doc_id.rsplit("/", 1)[-1]
    problem = _date_problem(stem)
    if problem is not None:
        raise ParseError(doc.path, problem)
    try:
        text = doc.raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = doc.raw.count(b"\n", 0, exc.start) + 1
        raise ParseError(doc.path, f"not UTF-8 text (byte {exc.start})", line=line) from None
    messages = irc.to_messages(stem, irc.parse_log(text))
    for index, m in enumerate(messages):
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
                event_date=when.date().isoformat(),
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
    ``limits.max_document_bytes``); its parse takes the kind its blocks belong to."""

    suffix = SUFFIX

    def parse(
        self, kind: CollectionKind, collection: CollectionConfig, doc: SourceDoc, version: str
    ) -> list[Block]:
        """See :func:`parse_log_blocks`."""
        return parse_log_blocks(kind, collection, doc, version)
