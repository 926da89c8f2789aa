"""The message record conversation grouping reads: who wrote what, where, when, to whom."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Message:
    """One unit of a channel, as grouping sees it.

    ``timestamp`` is seconds since the epoch (UTC). ``mentions`` are people the message names
    or is sent to (recipients, CC'd people, an irc nick it addresses); ``reply_to`` is the unit
    it explicitly answers, when its source says so. A ``system`` message (an irc join or quit)
    is never part of a conversation.
    """

    unit_id: str
    channel: str
    author: str
    text: str
    timestamp: float
    reply_to: str | None = None
    mentions: tuple[str, ...] = ()
    system: bool = False
