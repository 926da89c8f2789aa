"""The text a group is embedded from, input format ``group-v1``: its title, participants,
place and dates, then its members in order, cut to the model's input limit with the cut
recorded (the issue's "Linked groups", seed §2.1: the group's embedding represents the WHOLE
context)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from corpus_index.linked.describe import date_span, display
from corpus_index.linked.messages import Message
from corpus_index.linked.records import Group

FORMAT = "group-v1"
CUT_MARK = "…"


class GroupInput(NamedTuple):
    """The text to embed and whether it was cut to fit."""

    text: str
    cut: bool


class TextFit(Protocol):
    """How a group's text is made to fit the input of the model that embeds it: the text as
    it fits (ending in :data:`CUT_MARK` when cut) and whether it was cut."""

    @property
    def key(self) -> str:
        """What a fitted text depends on beyond the text (the limit, and what counts it): a
        group made under another key is described anew."""
        ...

    def __call__(self, text: str) -> GroupInput: ...


@dataclass(frozen=True, slots=True)
class WithinChars:
    """A fit of at most ``max_chars`` characters (for a model whose tokens are estimated at
    a number of characters each; the last kept line ends in :data:`CUT_MARK`)."""

    max_chars: int

    def __post_init__(self) -> None:
        if self.max_chars <= len(CUT_MARK):
            raise ValueError(f"max_chars must be more than {len(CUT_MARK)} (got {self.max_chars})")

    @property
    def key(self) -> str:
        return f"chars:{self.max_chars}"

    def __call__(self, text: str) -> GroupInput:
        if len(text) <= self.max_chars:
            return GroupInput(text, False)
        return GroupInput(text[: self.max_chars - len(CUT_MARK)].rstrip() + CUT_MARK, True)


def _member_line(m: Message) -> str:
    when = dt.datetime.fromtimestamp(m.timestamp, dt.UTC).strftime("%Y-%m-%d %H:%M")
    what = " ".join(f"{m.title}: {m.text}".split()) if m.title else " ".join(m.text.split())
    return f"{display(m.author)} ({m.source or 'message'}, {when} UTC): {what}"


def group_input(group: Group, units_by_id: Mapping[str, Message], *, fit: TextFit) -> GroupInput:
    """``group``'s ``group-v1`` text: a header (title, participants, place, dates) and then
    one line per member in ``order``, made to fit the model's input by ``fit`` (cut at the
    end, the last kept line ending in ``…``), with ``cut`` True when anything was left out.

    Raises:
        KeyError: a member is not in ``units_by_id``.
    """
    members = sorted(group.members, key=lambda m: m.order)
    units = [units_by_id[m.unit_id] for m in members]
    people = list(dict.fromkeys(display(u.author) for u in units if u.author))
    places = ", ".join(group.location_anchors) or ", ".join(
        dict.fromkeys(u.location for u in units if u.location)
    )
    lines = [
        f"title: {group.title}" if group.title else "",
        f"type: {group.group_type}",
        f"participants: {', '.join(people)}" if people else "",
        f"place: {places}" if places else "",
        f"dates: {date_span(group.event_date, group.event_date_end)}" if group.event_date else "",
        *(_member_line(u) for u in units),
    ]
    return fit("\n".join(line for line in lines if line))
