"""The irc-disentanglement log layout (Kummerfeld et al. 2019): ``[HH:MM] <nick> text`` chat
lines, ``[HH:MM]  * nick does`` actions, ``=== ...`` system lines, the date in the file name.

Units are lines counted from 0, addressed ``<file stem>:<line index>``, so a grouping can be
scored against the corpus's gold clusters.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

from corpus_index.linked.messages import Message

SUFFIX = ".ascii.txt"
_CHAT = re.compile(r"^\[(\d{1,2}):(\d{2})\] <([^>]*)> ?(.*)$")
_ACTION = re.compile(r"^\[(\d{1,2}):(\d{2})\]\s+\* (\S+) ?(.*)$")
_STAMP = re.compile(r"^\[(\d{1,2}):(\d{2})\]\s?(.*)$")
_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:_(\d{2}))?")
# a system line names who joined, left, quit or changed nick: the first word after ===
_SYSTEM_WHO = re.compile(r"^===\s+(\S+)")


@dataclass(frozen=True, slots=True)
class IrcLine:
    """One line of a log: its index, author (a system line's subject), text, and time."""

    index: int
    author: str
    text: str
    minute: int | None  # minutes since the file's date at 00:00; None on system lines
    system: bool


def named_date(stem: str) -> str | None:
    """The date-shaped start of a log's file stem (``2004-11-15``, or ``2004-13-45``: valid
    or not), or None when it has none."""
    m = _DATE.match(stem)
    return None if m is None else f"{m[1]}-{m[2]}-{m[3]}"


def log_date(stem: str) -> dt.datetime | None:
    """The UTC midnight a log's file stem names (``2004-11-15_03``, ``2004-12-25.train-c``),
    or None when the stem does not start with a valid date."""
    m = _DATE.match(stem)
    if m is None:
        return None
    try:
        return dt.datetime(int(m[1]), int(m[2]), int(m[3]), tzinfo=dt.UTC)
    except ValueError:
        return None


def parse_line(index: int, line: str) -> IrcLine:
    """One log line; a line in no known layout is kept as a system line (it has no author).
    A stamp that is no time of day (``[25:99]``) is no layout's: taken as one, it would date
    every later line of the log a day on (the clock going back more than an hour after it)."""
    line = line.rstrip("\r\n")
    if line.startswith("==="):
        who = _SYSTEM_WHO.match(line)
        return IrcLine(index, who[1] if who else "", line, None, True)
    chat = _CHAT.match(line) or _ACTION.match(line)
    if chat is not None and (minute := _clock(chat)) is not None:
        return IrcLine(index, chat[3], chat[4], minute, False)
    stamp = _STAMP.match(line)
    if stamp is not None and (minute := _clock(stamp)) is not None:
        return IrcLine(index, "", stamp[3], minute, True)
    return IrcLine(index, "", line, None, True)


def _clock(stamp: re.Match[str]) -> int | None:
    """Minutes since midnight of a ``[HH:MM]`` stamp, or None when it is no time of day."""
    hour, minute = int(stamp[1]), int(stamp[2])
    return hour * 60 + minute if hour < 24 and minute < 60 else None


def parse_log(text: str) -> list[IrcLine]:
    """Every line of a log, in order. Times run on past midnight: a clock that goes back by
    more than an hour is taken as the next day. A system line takes the last time seen."""
    lines: list[IrcLine] = []
    day = 0
    last: int | None = None
    raws = text.split("\n")
    if raws and raws[-1] == "":  # the newline that ends the last line
        raws.pop()
    for index, raw in enumerate(raws):
        line = parse_line(index, raw)
        if line.minute is not None:
            if last is not None and line.minute + day * 1440 < last - 60:
                day += 1
            minute = line.minute + day * 1440
            last = minute
            line = IrcLine(line.index, line.author, line.text, minute, line.system)
        lines.append(line)
    return lines


def to_messages(stem: str, lines: list[IrcLine], *, channel: str | None = None) -> list[Message]:
    """The lines of the log ``stem`` as messages ``<stem>:<index>`` of one channel (the stem by
    default); a system line carries the time of the chat line before it (or the first after)."""
    base = log_date(stem) or dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    origin = base.timestamp()
    known = [line.minute for line in lines if line.minute is not None]
    minute = known[0] if known else 0
    out = []
    for line in lines:
        if line.minute is not None:
            minute = line.minute
        out.append(
            Message(
                unit_id=f"{stem}:{line.index}",
                channel=channel or stem,
                author=line.author,
                text=line.text,
                timestamp=origin + 60.0 * minute,
                system=line.system,
            )
        )
    return out


def read_folder(folder: Path | str) -> dict[str, list[Message]]:
    """The messages of every ``*.ascii.txt`` log in ``folder`` (not below it), by file stem, in
    stem order. Only the logs are read: never annotations or gold clusters."""
    out: dict[str, list[Message]] = {}
    for path in sorted(Path(folder).glob(f"*{SUFFIX}")):
        stem = path.name[: -len(SUFFIX)]
        text = path.read_text(encoding="utf-8", errors="replace")
        out[stem] = to_messages(stem, parse_log(text))
    return out
