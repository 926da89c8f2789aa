"""Daily contexts: everything at one place on one day (seed §2.1, "all activity at Picton SIL
on Tuesday"), for the places units name."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from corpus_index.linked.messages import InTimeOrder, Message, day_of, place_of, time_key
from corpus_index.linked.records import Carried, Carry, Group, Member

MIN_UNITS = 2  # a day with one unit at a place is that unit, not a context


def daily_contexts(
    messages: Sequence[Message], *, carry: Carry | None = None
) -> list[Group | Carried]:
    """One ``daily_context`` group per (location, local date) with at least ``MIN_UNITS``
    units, members in time order, every one context. Places are compared without case.
    ``carry``: asked of each day before it is made (what it gives is taken instead)."""
    days: dict[tuple[str, str], list[Message]] = defaultdict(list)
    for m in messages:
        if m.location.strip() and not m.system:
            days[(place_of(m), day_of(m))].append(m)
    out: list[Group | Carried] = []
    for key in sorted(days):
        units = days[key]  # in order when the messages are
        if not isinstance(messages, InTimeOrder):
            units.sort(key=time_key)
        if len(units) < MIN_UNITS:
            continue
        if carry is not None:
            kept = carry("daily_context", [m.unit_id for m in units], units[-1].timestamp, "")
            if kept is not None:
                out.append(kept)
                continue
        members = tuple(Member(m.unit_id, k + 1, "context") for k, m in enumerate(units))
        out.append(
            Group(
                group_type="daily_context",
                processing_profile="mixed",
                members=members,
                resolution_status="resolved",
            )
        )
    return out
