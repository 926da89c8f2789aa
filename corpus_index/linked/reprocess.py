"""Temporal re-processing (seed "Linked Context" §2.3, §2.4, §7): groups still waiting for
their context are looked at again later, with a wider window, until they have it or give up.

The queue holds one item per group with a re-processing priority above 0, keyed by its type and
anchor unit (the question, the incident, a conversation's first message), so an item outlives
the group ids that change as members join. Timings (seed §7.1):

====  =============================================  ==========================================
  10  incident without context                       every 6 hours
   8  unanswered question                            6 h, 24 h, 48 h and 7 d after it was asked
   5  incident with some of its notes                daily
   3  validation pass                                once, 48 h after its newest content
   1  active conversation                            weekly
====  =============================================  ==========================================

A run takes the items that are due, highest priority first and then the longest since they were
last re-processed, at most 50; re-runs detection over the collection with the wider windows of
:data:`REPROCESS_WINDOWS`; and keeps an item (its attempt counted) while its group still has a
priority, drops it otherwise. A shift note that arrives makes the incidents at its place due at
once (the note finds the incident: §2.4). Time is always passed in (``now``), never read here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from corpus_index.linked.groups import Group, Windows, link_units
from corpus_index.linked.incidents import GIVE_UP_S, SHIFT_NOTE
from corpus_index.linked.messages import Message, place_of
from corpus_index.linked.people import NameResolver
from corpus_index.linked.questions import AnswerVerifier
from corpus_index.linked.records import Carried, anchor_of

HOUR = 3600.0
DAY = 24 * HOUR
BATCH = 50  # items per run at most
QUESTION_CHECKS_S = (6 * HOUR, DAY, 2 * DAY, 7 * DAY)
EVERY_S = {10: 6 * HOUR, 5: DAY, 1: 7 * DAY}  # priorities re-processed at a fixed interval
VALIDATION_AFTER_S = 2 * DAY
# the incidents a shift note at their place wakes: those still waiting for notes (without
# context, or with some); a complete one waits for its validation pass alone, which a wake
# would use up (its one attempt) before its time
AWAITING_NOTES = frozenset({10, 5})
# a re-run looks a week after a question and two days either side of an incident
REPROCESS_WINDOWS = Windows(answer_s=7 * DAY, notes_s=2 * DAY)


@dataclass(frozen=True, slots=True)
class QueueItem:
    """A group waiting to be re-processed.

    ``since`` is when its clock started: the question asked or the incident reported, or the
    group's newest content for a validation pass or a refresh. ``location`` is its anchor's
    place (an arriving shift note wakes the incidents there).
    """

    key: str
    group_type: str
    anchor: str
    priority: int
    since: float
    location: str = ""
    last_reprocessed_at: float | None = None
    attempts: int = 0


class Reprocessed(NamedTuple):
    """What a run did: the groups as re-detected, the queue after it, the keys processed."""

    groups: list[Group]
    queue: list[QueueItem]
    processed: list[str]


def queue_of(
    groups: Sequence[Group | Carried],
    by_id: Mapping[str, Message],
    *,
    previous: Sequence[QueueItem] = (),
) -> list[QueueItem]:
    """The queue for ``groups`` (as made, or carried by their ids): one item per group with
    priority above 0, carrying over when an item with the same key and priority was last
    re-processed and how often."""
    before = {item.key: item for item in previous}
    out = []
    for g in groups:
        if isinstance(g, Carried):
            priority, anchor = g.priority, g.anchor
        else:
            priority, anchor = g.reprocess_priority, anchor_of(g)
        if priority <= 0:
            continue
        key = f"{g.group_type}:{anchor}"
        if priority in (10, 8, 5):  # waits for its context: since its anchor was written
            since = by_id[anchor].timestamp
        elif isinstance(g, Carried):  # its newest unit's time, as a made group has it
            since = max(by_id[u].timestamp for u in g.member_ids)
        else:
            since = g.latest_content_at or 0.0
        place = place_of(by_id[anchor])
        old = before.get(key)
        if old is not None and old.priority == priority:
            # the same reason: when it was last re-processed and how often carry over
            item = QueueItem(
                key,
                g.group_type,
                anchor,
                priority,
                since,
                place,
                old.last_reprocessed_at,
                old.attempts,
            )
        else:  # a new reason starts afresh
            item = QueueItem(key, g.group_type, anchor, priority, since, place)
        out.append(item)
    return sorted(out, key=lambda i: i.key)


def next_due(item: QueueItem) -> float | None:
    """When ``item`` is next due (None: never again, its checks are done). A question's next
    check is the first after it was last re-processed: a run that comes late (the first sync
    of old messages, a daemon that was down) passes every check it came after, so the item
    is not due again at once."""
    if item.priority == 8:
        done = item.last_reprocessed_at
        later = [c for c in QUESTION_CHECKS_S if done is None or item.since + c > done]
        return item.since + later[0] if later else None
    if item.priority == 3:
        return item.since + VALIDATION_AFTER_S if item.attempts == 0 else None
    every = EVERY_S.get(item.priority)
    if every is None:
        return None
    last = item.last_reprocessed_at
    return (item.since if last is None else last) + every


def due(
    queue: Sequence[QueueItem],
    now: float,
    *,
    arrived: Sequence[Message] = (),
    limit: int = BATCH,
) -> list[QueueItem]:
    """The items to re-process at ``now``: those whose time has come, and the incidents still
    waiting for notes at the place of a shift note in ``arrived`` (within a week of their
    report); in :func:`order`, at most ``limit``."""
    places = {place_of(m) for m in arrived if m.source == SHIFT_NOTE}
    ready = []
    for item in queue:
        when = next_due(item)
        woken = (
            item.group_type == "incident_context"
            and item.priority in AWAITING_NOTES
            and item.location in places
            and now - item.since < GIVE_UP_S
        )
        if woken or (when is not None and when <= now):
            ready.append(item)
    ready.sort(key=lambda i: (*order(i), i.key))
    return ready[:limit]


def order(item: QueueItem) -> tuple[float, float, float]:
    """Where ``item`` stands among the due: by priority, then the longest since last
    re-processed (never first), then the longest due (of two never re-processed, the older
    waited longer: a week-old question is not held back behind newer ones)."""
    never = float("-inf")  # never re-processed: first (0.0, the epoch, is a time)
    last = never if item.last_reprocessed_at is None else item.last_reprocessed_at
    when = next_due(item)
    return (-item.priority, last, item.since if when is None else when)


def counted(item: QueueItem, priority_before: int, at: float) -> QueueItem:
    """``item`` as re-processed ``at``, when it was of ``priority_before``: one attempt more
    for the same reason; for a new one (an incident that found some of its notes) its first,
    re-processed ``at`` all the same, so it is next due a period on from this run rather than
    from its report (one whose report is days old was due again at the next run)."""
    if priority_before == item.priority:
        return replace(item, last_reprocessed_at=at, attempts=item.attempts + 1)
    return replace(item, last_reprocessed_at=at, attempts=0)


def reprocess(
    messages: Sequence[Message],
    queue: Sequence[QueueItem],
    *,
    now: float,
    arrived: Sequence[Message] = (),
    registry: NameResolver | None = None,
    verifier: AnswerVerifier | None = None,
    limit: int = BATCH,
) -> Reprocessed:
    """One re-processing run at ``now`` over a collection's units (``arrived``: those new
    since the last run, among ``messages``).

    Detection is re-run over every unit with :data:`REPROCESS_WINDOWS`; the due items are
    marked re-processed (``now``, one more attempt) and kept while their group still has a
    priority and a check to come; items not due keep their state. Items whose groups no longer
    need anything (answered, complete, timed out, given up, validated) leave the queue.
    """
    batch = {item.key for item in due(queue, now, arrived=arrived, limit=limit)}
    groups = link_units(
        messages, registry=registry, now=now, windows=REPROCESS_WINDOWS, verifier=verifier
    )
    by_id = {m.unit_id: m for m in messages}
    fresh = queue_of(groups, by_id, previous=queue)
    prior = {item.key: item.priority for item in queue}
    out = []
    for item in fresh:
        if item.key in batch:
            item = counted(item, prior[item.key], now)
        if next_due(item) is not None:
            out.append(item)
    return Reprocessed(groups, out, sorted(batch))
