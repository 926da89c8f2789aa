"""A second look at a channel's conversations: two that the message-by-message linker kept
apart are joined when they are one exchange read whole (seed "Linked Context" §5.1).

The linker decides each message against its predecessors one at a time, from what it has
seen so far; a message that opens a side remark ("Amelia can't do pork ...") or comes back
after a slow stretch can start a conversation of its own although the thread it belongs to is
plain once the whole of it is there. This pass joins two conversations of one channel when

- they are close in time *for that channel*: the later one starts at most
  :data:`WINDOW_PACES` of the channel's paces after the earlier one's last message (or while
  it is still going), the pace being read from the gaps between the channel's recent messages
  (:func:`~corpus_index.linked.features.channel_pace`), so seconds in a busy support channel
  and minutes to hours in a staff chat;
- they share a participant: an author of one wrote in, or is named by, the other;
- they are on one topic: the cosine of their TF-IDF centroids (document frequencies over the
  collection, :class:`~corpus_index.linked.similarity.Similarity`) is at least
  :data:`MIN_TOPIC`.

Joining is agglomerative and deterministic: in passes over the conversations in order of
their first message, each is joined to the earlier one (among the :data:`LOOK_BACK` before it)
it agrees with best, until a pass joins nothing; a joined conversation is judged by all of
its messages (its centroid and its participants), so a remark joins the thread once the
thread has shown who takes part in it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from corpus_index.linked.features import channel_pace
from corpus_index.linked.messages import Message, addressed_word
from corpus_index.linked.similarity import Similarity, Vector, added, cosine

WINDOW_PACES = 24.0  # how long after a conversation's last message another may still join it
MIN_TOPIC = 0.3  # TF-IDF centroid cosine two conversations need to be on one topic
LOOK_BACK = 50  # conversations before one (by first message) it may join


@dataclass(slots=True)
class _Conversation:
    first: int  # channel position of its first message
    last_time: float
    members: list[str]
    authors: set[str]
    named: set[str]  # people its messages are sent to or start with (as chat addresses them)
    centroid: Vector  # the sum of its members' TF-IDF vectors


def _key(m: Message) -> str:
    return f"{m.source}/{m.channel}" if m.source else m.channel


def merge_conversations(
    conversations: Sequence[Sequence[str]],
    by_id: Mapping[str, Message],
    *,
    similarity: Similarity,
    window_paces: float = WINDOW_PACES,
    min_topic: float = MIN_TOPIC,
) -> list[list[str]]:
    """``conversations`` (lists of unit ids of one or more channels, each within one) with
    those that are one exchange joined; members in time order, conversations in order of their
    first message. Deterministic; the input order of the conversations does not matter."""
    by_channel: dict[str, list[list[str]]] = {}
    for ids in conversations:
        by_channel.setdefault(_key(by_id[ids[0]]), []).append(list(ids))
    out: list[list[str]] = []
    for channel in sorted(by_channel):
        out.extend(_merge_channel(by_channel[channel], by_id, similarity, window_paces, min_topic))
    return out


def _merge_channel(
    conversations: list[list[str]],
    by_id: Mapping[str, Message],
    similarity: Similarity,
    window_paces: float,
    min_topic: float,
) -> list[list[str]]:
    order = sorted((m for c in conversations for m in c), key=lambda u: (by_id[u].timestamp, u))
    position = {u: i for i, u in enumerate(order)}
    times = np.array([by_id[u].timestamp for u in order])
    pace = channel_pace(times, np.zeros(len(times), dtype=bool))
    convs = []
    for ids in conversations:
        members = sorted(ids, key=position.__getitem__)
        messages = [by_id[u] for u in members]
        convs.append(
            _Conversation(
                first=position[members[0]],
                last_time=max(m.timestamp for m in messages),
                members=members,
                authors={m.author.lower() for m in messages if m.author},
                named={p.lower() for m in messages for p in m.mentions}
                | {addressed_word(m.text) for m in messages},
                centroid=similarity.centroid(members),
            )
        )
    convs.sort(key=lambda c: c.first)
    joined = True
    while joined and len(convs) > 1:
        joined = False
        kept: list[_Conversation] = []
        for b in convs:
            start = times[b.first]
            reach = start - window_paces * pace[b.first]
            best, best_topic = None, min_topic
            for a in kept[-LOOK_BACK:]:
                if a.last_time < reach or not _share_someone(a, b):
                    continue
                topic = cosine(a.centroid, b.centroid)
                if topic >= best_topic:
                    best, best_topic = a, topic
            if best is None:
                kept.append(b)
                continue
            best.members = sorted(best.members + b.members, key=position.__getitem__)
            best.last_time = max(best.last_time, b.last_time)
            best.authors |= b.authors
            best.named |= b.named
            best.centroid = added(best.centroid, b.centroid)
            joined = True
        convs = kept
    return [c.members for c in convs]


def _share_someone(a: _Conversation, b: _Conversation) -> bool:
    """An author of one wrote in the other, or is named by it."""
    return bool(a.authors & b.authors or _forms(a.authors) & b.named or _forms(b.authors) & a.named)


def _forms(authors: set[str]) -> set[str]:
    """The names an author may be named by: whole, and the first word."""
    return authors | {a.split()[0] for a in authors if a.split()}
