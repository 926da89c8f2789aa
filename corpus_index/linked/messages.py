"""The message record conversation grouping reads: who wrote what, where, when, to whom."""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Message:
    """One unit of a channel, as grouping sees it.

    ``timestamp`` is seconds since the epoch (UTC). ``mentions`` are people the message names
    or is sent to (recipients, CC'd people, an irc nick it addresses); ``reply_to`` is the unit
    it explicitly answers, when its source says so. A ``system`` message (an irc join or quit)
    is never part of a conversation. ``source``, ``location`` and ``title`` are what the other
    groupings (questions and answers, incidents, days at a place) read.
    """

    unit_id: str
    channel: str
    author: str
    text: str
    timestamp: float
    reply_to: str | None = None
    mentions: tuple[str, ...] = ()
    system: bool = False
    source: str = ""  # discord_chat, sms_message, email_thread, incident_report, shift_note, ...
    location: str = ""
    title: str = ""  # a subject or title line, where the source has one
    event_date: str = ""  # the local calendar date (ISO) it was written on, where known
    # (in its collection's ``timezone`` where one is set, see ``local_day``)


# The years a message's time may fall in (UTC). Its time is turned back into a date in many
# places (a day's group, a timeline's labels, a group's text); Python's dates end at years 1
# and 9999, so a time at either edge (``0001-01-01T00:00+14:00`` is in year 0 UTC) would be
# accepted and break later. A year to spare at the top; nothing real predates 1900.
FIRST_YEAR, LAST_YEAR = 1900, 9998
SUPPORTED_YEARS = f"{FIRST_YEAR} to {LAST_YEAR} (UTC)"
_EARLIEST = dt.datetime(FIRST_YEAR, 1, 1, tzinfo=dt.UTC).timestamp()
_LATEST = dt.datetime(LAST_YEAR + 1, 1, 1, tzinfo=dt.UTC).timestamp()


def supported_time(seconds: float) -> bool:
    """Whether a message time (seconds since the epoch) falls in the years
    :data:`FIRST_YEAR` to :data:`LAST_YEAR` UTC, the times a unit may have."""
    return _EARLIEST <= seconds < _LATEST


def supported_moment(when: dt.datetime) -> bool:
    """:func:`supported_time` of an aware datetime, judged by its UTC year itself (its
    float seconds round the last microseconds of LAST_YEAR up to the year after)."""
    try:
        year = when.astimezone(dt.UTC).year
    except OverflowError:  # before year 1 or after 9999 in UTC
        return False
    return FIRST_YEAR <= year <= LAST_YEAR


def local_day(when: dt.datetime, timezone: str = "") -> str:
    """The calendar date (ISO) of the aware time ``when``: in the IANA zone ``timezone`` (a
    collection's ``timezone``) where one is given, else in ``when``'s own offset. A call
    stamped ``2025-12-04T22:05:00Z`` is on 2025-12-05 in ``Australia/Sydney``, on 2025-12-04
    without a zone.

    Raises:
        zoneinfo.ZoneInfoNotFoundError: ``timezone`` names no zone (the configuration
            refuses one, see :func:`corpus_index.collection.timezone_problem`).
    """
    if timezone:
        when = when.astimezone(zoneinfo.ZoneInfo(timezone))
    return when.date().isoformat()


def time_key(m: Message) -> tuple[float, str]:
    """The order the groupings read units in: by time, then by unit id."""
    return (m.timestamp, m.unit_id)


class InTimeOrder(list[Message]):
    """Messages in :func:`time_key` order, as whoever made the list sorted them (or took
    them, in order, from such a list): a grouping given one reads it as it is instead of
    sorting it again (a sort of 50,000 messages by their key costs about 0.04 s, and a run's
    groupings each made one)."""


def in_time_order(messages: Iterable[Message]) -> InTimeOrder:
    """``messages`` in :func:`time_key` order: themselves when marked so, else sorted."""
    if isinstance(messages, InTimeOrder):
        return messages
    return InTimeOrder(sorted(messages, key=time_key))


_ADDRESS_END = re.compile(r"[:,;>!]+$")
_REPLY_PREFIX = re.compile(r"^\s*(?:(?:re|fwd?|fw|aw|sv)\s*(?:\[\d+\])?\s*:\s*)+", re.IGNORECASE)


def thread_subject(title: str) -> tuple[str, bool]:
    """A subject line without its reply and forward prefixes (case and spaces folded), and
    whether it had any: ``"RE: Fwd: Van quote"`` -> ``("van quote", True)``."""
    bare = _REPLY_PREFIX.sub("", title)
    return " ".join(bare.split()).casefold(), len(bare) != len(title)


def addressed_word(text: str) -> str:
    """The lower-cased first word of ``text`` without the punctuation that follows a name
    someone is addressed by (``bob:``, ``alice,``); a person is addressed when it is their
    name. Empty for an empty text."""
    first = text.split(maxsplit=1)
    return _ADDRESS_END.sub("", first[0].lower()) if first else ""


def place_of(message: Message) -> str:
    """The message's place as the groupings compare places: its location, trimmed and
    case-folded ("" for none)."""
    return message.location.strip().casefold()


def day_of(message: Message) -> str:
    """The message's calendar date: its own ``event_date``, else the UTC date of its time."""
    if message.event_date:
        return message.event_date
    return dt.datetime.fromtimestamp(message.timestamp, dt.UTC).date().isoformat()
