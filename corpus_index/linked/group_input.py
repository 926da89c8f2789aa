"""The text a group is embedded from, input format ``group-v1``: its title, participants,
place and dates, then its members in order, cut to the model's input limit with the cut
recorded (the issue's "Linked groups", seed §2.1: the group's embedding represents the WHOLE
context).

A text too long is cut across its members, not at its end: each member's line keeps as much
as a fair share of the room allows (a short line whole, the long ones cut alike), so a long
incident report does not push its shift notes out of the text; only when even
:data:`MIN_LINE` characters a member do not fit are the last members left out."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import NamedTuple

from corpus_index.linked.describe import date_span, display
from corpus_index.linked.messages import Message
from corpus_index.linked.records import Group

FORMAT = "group-v1"
CUT_MARK = "…"
# a member's line is cut no shorter than this: its author, source and time (about 50
# characters) and a few words
MIN_LINE = 120


class GroupInput(NamedTuple):
    """The text to embed and whether it was cut to fit."""

    text: str
    cut: bool


def _member_line(m: Message) -> str:
    when = dt.datetime.fromtimestamp(m.timestamp, dt.UTC).strftime("%Y-%m-%d %H:%M")
    what = " ".join(f"{m.title}: {m.text}".split()) if m.title else " ".join(m.text.split())
    return f"{display(m.author)} ({m.source or 'message'}, {when} UTC): {what}"


def group_input(group: Group, units_by_id: Mapping[str, Message], *, max_chars: int) -> GroupInput:
    """``group``'s ``group-v1`` text: a header (title, participants, place, dates) and then
    one line per member in ``order``, cut to ``max_chars`` characters (the last kept line
    ending in ``…``) with ``cut`` True when anything was left out.

    Raises:
        KeyError: a member is not in ``units_by_id``.
        ValueError: ``max_chars`` is not positive.
    """
    if max_chars <= 0:
        raise ValueError(f"max_chars must be positive (got {max_chars})")
    members = sorted(group.members, key=lambda m: m.order)
    units = [units_by_id[m.unit_id] for m in members]
    people = list(dict.fromkeys(display(u.author) for u in units if u.author))
    places = ", ".join(group.location_anchors) or ", ".join(
        dict.fromkeys(u.location for u in units if u.location)
    )
    head = [
        f"title: {group.title}" if group.title else "",
        f"type: {group.group_type}",
        f"participants: {', '.join(people)}" if people else "",
        f"place: {places}" if places else "",
        f"dates: {date_span(group.event_date, group.event_date_end)}" if group.event_date else "",
    ]
    header = "\n".join(line for line in head if line)
    lines = [_member_line(u) for u in units]
    text = "\n".join([header, *lines])
    if len(text) <= max_chars:
        return GroupInput(text, False)
    shared = _shared(lines, max_chars - len(header))
    if shared is None:  # the header alone (nearly) fills it: cut at the end
        keep = max(max_chars - len(CUT_MARK), 0)
        return GroupInput(text[:keep].rstrip() + CUT_MARK, True)
    return GroupInput("\n".join([header, *shared]), True)


def _shared(lines: list[str], room: int) -> list[str] | None:
    """``lines`` fitted into ``room`` characters, each after a newline: as many of the first
    lines as can have :data:`MIN_LINE` characters each, every one whole if it is shorter than
    the share the room leaves it (the others sharing what the short ones leave), else cut to
    that share and ending in ``…``. None when not even one line fits."""
    for n in range(min(len(lines), room // (MIN_LINE + 1)), 0, -1):
        kept = lines[:n]
        free = room - n  # the newline before each
        # the share: lines shorter than it keep whole, the rest split what those leave
        share = free // n
        for k, length in enumerate(sorted(map(len, kept))):
            if length > share:
                break
            free -= length
            share = free // (n - k - 1) if n - k - 1 else free
        if share < MIN_LINE and any(len(line) > share for line in kept):
            continue
        return [
            line if len(line) <= share else line[: share - len(CUT_MARK)].rstrip() + CUT_MARK
            for line in kept
        ]
    return None
