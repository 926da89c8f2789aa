"""What the ``conversation_timeline`` asset draws: one channel's conversations over a window of
time, read from the links the ``linked_groups`` step keeps (no message decoded).

Each conversation with a message in the window is a lane, in order of its first message there;
each message is a dot on its conversation's lane at its place in the channel (the axis is the
channel's messages in order, labelled with their times: a quiet night takes no room), joined
by an arc to the message it continues (its parent, however early: a parent before the window
is drawn at its left edge).
Messages that continue nothing and that nothing continues share the last lane. A lane is named
by its size and its conversation group's id, never by what its messages say: the picture sits
in the run's metadata, which the operators of every tenant read. It shows at a glance what a
table cannot: several conversations running at once in one channel, and which message the
linker took each reply to continue.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from corpus_index.linked.records import group_id
from corpus_index.linked.relink import Link, linked_conversations, read_links
from corpus_index.plots import timeline_chart
from corpus_index.warehouse import Warehouse

MAX_LANES = 24  # the conversations with the most messages in the window; the rest are counted
WINDOW_MESSAGES = 150  # a window's messages by default
MAX_MESSAGES = 5000  # a window's messages at most, by messages or by hours
MAX_HOURS = 24 * 366.0
TICKS = 6  # time labels on the axis, about


@dataclass(frozen=True, slots=True)
class Lane:
    """One conversation in the window (or the messages alone, ``alone``)."""

    label: str
    places: tuple[int, ...]  # its messages' places in the window (0: its first message)
    times: tuple[float, ...]  # their times
    # (place of the parent, place of the message) of each link to a parent; -1: a parent
    # before the window
    edges: tuple[tuple[float, float], ...]
    size: int  # messages in the whole conversation
    alone: bool = False


@dataclass(frozen=True, slots=True)
class Timeline:
    """One channel's window: its lanes (conversations, then the messages alone)."""

    tenant_id: str
    channel: str
    start: float
    end: float
    lanes: list[Lane]
    ticks: list[tuple[int, str]]  # (place, its time in UTC) to label the axis with
    messages: int  # in the window, drawn or not
    hidden: int = 0  # conversations in the window beyond :data:`MAX_LANES`, not drawn
    channels: list[str] = field(default_factory=list)  # every channel with links, by name
    hours: float = 0.0  # the window asked for in hours (0: by messages)
    earlier: int = 0  # messages of those hours before the newest MAX_MESSAGES, not drawn

    @property
    def conversations(self) -> int:
        return sum(1 for lane in self.lanes if not lane.alone) + self.hidden


def timeline(
    links: Sequence[Link],
    *,
    collection: str,
    channel: str = "",
    messages: int = WINDOW_MESSAGES,
    hours: float = 0.0,
) -> Timeline | None:
    """One channel's newest ``messages`` messages, or with ``hours`` the messages of that many
    hours up to its newest (the newest :data:`MAX_MESSAGES` of them, the earlier counted): the
    channel named ``channel`` (a tenant's: of two tenants' channels
    of that name, the one with more messages), by default the channel with the most of the
    collection's newest ``messages`` messages (so a quiet channel's window is days, a busy
    one's minutes).

    Args:
        links: the collection's links (``conversation_links``, :func:`read_links`).
        collection: whose links (a conversation's group id is made from it).

    Returns:
        None when there are no links.

    Raises:
        ValueError: ``channel`` has no links, or ``messages`` or ``hours`` is out of range.
    """
    if not 1 <= messages <= MAX_MESSAGES:
        raise ValueError(f"messages must be from 1 to {MAX_MESSAGES}, not {messages}")
    if not 0 <= hours <= MAX_HOURS:
        raise ValueError(f"hours must be from 0 (use messages) to {MAX_HOURS}, not {hours}")
    if not links:
        return None
    names = sorted({x.channel for x in links})
    if channel and channel not in names:
        raise ValueError(f"channel {channel!r} has no messages; channels: {', '.join(names)}")
    ordered = sorted(
        (x for x in links if x.channel == (channel or x.channel)),
        key=lambda x: (x.timestamp, x.channel, x.position),
    )
    newest = Counter((x.tenant_id, x.channel) for x in ordered[-messages:])
    tenant, channel = min(newest, key=lambda k: (-newest[k], k))
    mine = [x for x in ordered if (x.tenant_id, x.channel) == (tenant, channel)]
    end = mine[-1].timestamp
    start = end - hours * 3600 if hours else mine[-min(messages, len(mine))].timestamp
    window = [x for x in mine if x.timestamp >= start]
    # a busy channel's hours may hold more than a picture can draw (a dot and an arc each)
    earlier = max(len(window) - MAX_MESSAGES, 0)
    if earlier:
        window = window[earlier:]
        start = window[0].timestamp
    place = {x.position: k for k, x in enumerate(window)}
    lanes: list[Lane] = []
    alone: list[Link] = []
    for conversation in linked_conversations(mine):
        shown = [x for x in conversation if x.position in place]
        if not shown:
            continue
        if len(conversation) == 1:
            alone.extend(shown)
            continue
        edges = tuple(
            (float(place.get(x.parent, -1)), float(place[x.position]))
            for x in shown
            if x.parent != x.position
        )
        gid = group_id(tenant, collection, "conversation", [x.unit_id for x in conversation])
        label = f"{len(conversation)} messages · {gid[:12]}"
        lanes.append(
            Lane(
                label,
                tuple(place[x.position] for x in shown),
                tuple(x.timestamp for x in shown),
                edges,
                len(conversation),
            )
        )
    kept = sorted(lanes, key=lambda lane: (-len(lane.places), lane.places[0]))[:MAX_LANES]
    hidden = len(lanes) - len(kept)
    kept.sort(key=lambda lane: lane.places[0])
    if alone:
        alone.sort(key=lambda x: x.position)
        kept.append(
            Lane(
                f"alone ({len(alone)})",
                tuple(place[x.position] for x in alone),
                tuple(x.timestamp for x in alone),
                (),
                1,
                alone=True,
            )
        )
    step = max(1, len(window) // TICKS)
    ticks = [(k, _utc(window[k].timestamp)) for k in range(0, len(window), step)]
    return Timeline(
        tenant, channel, start, end, kept, ticks, len(window), hidden, names, hours, earlier
    )


def collection_timeline(
    warehouse: Warehouse,
    collection: str,
    *,
    channel: str = "",
    messages: int = WINDOW_MESSAGES,
    hours: float = 0.0,
) -> Timeline | None:
    """:func:`timeline` of the links the last ``linked_groups`` run kept for ``collection``
    (None when it kept none: not grouped, or not linked yet).

    Raises:
        ValueError: see :func:`timeline`; or the links were written by an earlier version,
            without their messages' ids (the next sync writes them).
    """
    table = warehouse.read("conversation_links", (collection,))
    links = read_links(table)
    return timeline(links, collection=collection, channel=channel, messages=messages, hours=hours)


def picture(t: Timeline, collection: str) -> bytes:
    """The PNG of ``t``."""
    shown = f"{t.conversations} conversations" + (
        f" ({t.conversations - t.hidden} drawn)" if t.hidden else ""
    )
    title = (
        f"{collection}: {t.channel} ({t.tenant_id}), {t.messages} messages in the "
        f"{_span(t.end - t.start)} to its newest{_earlier(t)}: {shown}"
    )
    return timeline_chart(t.lanes, ticks=t.ticks, title=title)


def strips(t: Timeline, *, width: int = 60) -> list[str]:
    """``t`` as lines of text for a terminal: a heading, then a line a lane, its label and a
    strip of ``width`` columns over the window's messages in order: ``o`` where the lane has
    a message, ``-`` between its first and last, ``.`` for the messages alone."""
    n = max(t.messages, 1)
    columns = min(width, n)
    pad = max((len(lane.label) for lane in t.lanes), default=0)
    first, last = (t.ticks[0][1], _utc(t.end)) if t.ticks else ("", "")
    hidden = f", {t.hidden} more not drawn" if t.hidden else ""
    out = [
        f"{t.channel} ({t.tenant_id}): {t.messages} messages, {first} to {last} UTC, "
        f"{t.conversations} conversations{hidden}{_earlier(t)}"
    ]
    for lane in t.lanes:
        cells = [" "] * columns
        at = [p * columns // n for p in lane.places]
        if not lane.alone:
            for k in range(min(at), max(at) + 1):
                cells[k] = "-"
        for k in at:
            cells[k] = "." if lane.alone else "o"
        out.append(f"{lane.label.ljust(pad)}  |{''.join(cells)}|")
    return out


def as_json(t: Timeline) -> dict[str, object]:
    """``t`` as plain values (``corpus conversations --json``)."""
    return {
        "tenant_id": t.tenant_id,
        "channel": t.channel,
        "start": t.start,
        "end": t.end,
        "messages": t.messages,
        "conversations": t.conversations,
        "hidden": t.hidden,
        "channels": t.channels,
        "earlier": t.earlier,
        "lanes": [
            {
                "label": lane.label,
                "alone": lane.alone,
                "size": lane.size,
                "places": list(lane.places),
                "times": list(lane.times),
                "edges": [list(e) for e in lane.edges],
            }
            for lane in t.lanes
        ],
    }


def _earlier(t: Timeline) -> str:
    if not t.earlier:
        return ""
    return f" ({t.earlier} earlier messages of the {t.hours:g} hours not drawn)"


def _span(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 60:.0f} minutes"


def _utc(seconds: float) -> str:
    # a time no date holds (a unit indexed before its years were checked) labels no place;
    # the timeline is drawn all the same
    try:
        return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%d %b %H:%M")
    except (OverflowError, OSError, ValueError):
        return "?"
