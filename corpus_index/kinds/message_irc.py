"""The ``irc`` layout of the ``messages`` kind: irc-disentanglement logs (``*.ascii.txt``), one
document per log, one unit per line addressed ``<file stem>:<line index>`` (from 0), so a
grouping of the collection can be scored against the corpus's gold clusters.

Chat and action lines are ``irc_chat`` units; ``===`` system lines (joins, quits, nick
changes) are ``irc_system`` units, kept so every line has its unit but never embedded. The
date comes from the file name, the time of day from the line; a line that starts with the
nick of someone who has spoken earlier in the log mentions them.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from corpus_index.errors import ParseError
from corpus_index.kinds.base import CollectionKind, FileKind, new_block
from corpus_index.linked import irc
from corpus_index.linked.messages import addressed_word
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
        ParseError: the file is not ASCII/UTF-8 text, or its name carries no date.
    """
    stem = doc.doc_id.rsplit("/", 1)[-1]
    if irc.log_date(stem) is None:
        raise ParseError(
            doc.path, "an irc log's file name starts with its date (2004-11-15_03.ascii.txt)"
        )
    try:
        text = doc.raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = doc.raw.count(b"\n", 0, exc.start) + 1
        raise ParseError(doc.path, f"not UTF-8 text (byte {exc.start})", line=line) from None
    messages = irc.to_messages(stem, irc.parse_log(text))
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


class IrcLayout(FileKind):
    """Reads like a file kind (one log per document, listed by suffix, bounded by
    ``limits.max_document_bytes``); its parse takes the kind its blocks belong to."""

    suffix = SUFFIX

    def parse(
        self, kind: CollectionKind, collection: CollectionConfig, doc: SourceDoc, version: str
    ) -> list[Block]:
        """See :func:`parse_log_blocks`."""
        return parse_log_blocks(kind, collection, doc, version)
