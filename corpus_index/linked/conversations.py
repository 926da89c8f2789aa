"""Conversation disentanglement: per channel, each message joins the conversation it most
likely continues, or starts a new one (seed "Linked Context" §5.1).

A message continues the conversation of the earlier message it is most likely a reply to: the
one it explicitly answers (``reply_to``), or, failing that, the best of "a new conversation"
and its predecessors in the window under a :class:`~corpus_index.linked.model.LinkModel`,
which weighs mentions of a participant, the same author going on, the time and the messages
since that message, the time since the last message of *that message's conversation* (as
decided so far, message by message), whether its author has moved on, and topic similarity.
A conversation silent for :data:`IDLE_S` (48 hours) is no candidate: the model never saw
such a pause on irc, where it was fitted. System messages (joins and quits) are
conversations of their own. Where the model would have a
message start a conversation, a reply it cannot see by those features (an e-mail ``Re:``, an
answer to an open question hours later) still joins the conversation it answers
(:mod:`corpus_index.linked.responses`).

:func:`five_minute_rule` is the channel-wide baseline: a message less than five minutes after
the channel's previous one belongs to the same conversation.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from corpus_index.linked.features import ChannelFeatures, channel_features
from corpus_index.linked.messages import InTimeOrder, Message
from corpus_index.linked.model import LinkModel
from corpus_index.linked.questions import ANSWER_WINDOW_S
from corpus_index.linked.responses import Responses
from corpus_index.linked.state import ConversationState
from corpus_index.linked.topic import Embed

BLOCK = 2048  # messages whose pair features are held at once (about 12 MiB with a window of 50)
# a conversation silent longer than an answer is looked for (48 hours) is not continued by the
# model's choice: an explicit reply, an e-mail thread or an answer to an open question still
# joins it (irc never pauses this long; a staff chat does, and someone addressed days later is
# asked something new)
IDLE_S = ANSWER_WINDOW_S
# the decoding's version, in the digest of the links it decided (corpus_index.linked.relink):
# a change to what it reads or decides must change it (v2: conversations idle past IDLE_S)
DECODE_VERSION = "decode-v2"


def by_channel(messages: Sequence[Message]) -> dict[str, list[Message]]:
    """Messages per channel, each channel in time order (ties keep the input order). A
    channel is one source's (``<source>/<channel>`` when the source is known): a shift note
    filed under a chat channel's name never joins a chat conversation."""
    channels: dict[str, list[Message]] = defaultdict(list)
    for m in messages:
        channels[f"{m.source}/{m.channel}" if m.source else m.channel].append(m)
    if isinstance(messages, InTimeOrder):  # each channel in order as it is
        return dict(channels)
    return {c: sorted(ms, key=lambda m: m.timestamp) for c, ms in channels.items()}


def link_parents(
    messages: Sequence[Message],
    *,
    model: LinkModel | None = None,
    embed: Embed | None = None,
    responses: bool = True,
) -> list[int]:
    """For one channel's messages in order, the index of the message each continues from, or
    its own index when it starts a conversation.

    Args:
        model: the link weights (default: the ones shipped, see :meth:`LinkModel.load`).
        embed: an embedding function for topic similarity instead of TF-IDF cosine.
        responses: see :func:`decode`.
    """
    model = model or LinkModel.load()
    if not messages:
        return []
    features = channel_features(messages, window=model.window, embed=embed)
    return decode(messages, features, model, responses=responses)


class OutOfWindow(Exception):
    """A message of a slice of a channel continues one before the slice's window (see
    :func:`decode`'s ``floor``): what it joins is not known from the slice."""


def decode(
    messages: Sequence[Message],
    features: ChannelFeatures,
    model: LinkModel,
    *,
    pair: np.ndarray | None = None,
    before: Sequence[int] = (),
    responses: bool = True,
    state: ConversationState | None = None,
    floor: int = 0,
) -> list[int]:
    """:func:`link_parents` on features computed already. The pair features are computed
    ``BLOCK`` messages at a time unless ``pair`` holds them all (its conversation columns are
    then overwritten as the conversations are decided).

    Args:
        before: the parents of the first ``len(before)`` messages, decided already (by an
            earlier run on the same messages): they are taken as they are, and only the
            messages after them are decided (``features`` need rows from there on only).
        responses: a message the model would have start a conversation joins the one it
            answers by how people write, when it does (an e-mail ``Re:``, a reply to an open
            question: :class:`~corpus_index.linked.responses.Responses`); off, the model
            alone decides (what training replays).
        state: the conversations of the messages in ``before``, known already (see
            :meth:`~corpus_index.linked.state.ConversationState.seeded`): ``before`` is then
            not joined message by message, and only its length is read.
        floor: the first message a later one may continue: one that continues an earlier
            message (an explicit reply, an e-mail thread) raises :class:`OutOfWindow`.
    """
    index = {m.unit_id: i for i, m in enumerate(messages)}
    pair_w = np.asarray(model.pair_weights, dtype=np.float32)
    own = features.self_ @ np.asarray(model.self_weights, dtype=np.float32)
    replies = Responses(messages, features) if responses else None
    parents: list[int] = list(before)
    if state is None:
        state = ConversationState(features)
        for i, parent in enumerate(parents):
            state.join(i, parent)
    for start in range(len(parents), len(messages), BLOCK):
        stop = min(start + BLOCK, len(messages))
        rows = pair[start:stop] if pair is not None else features.pair_rows(start, stop)
        for i in range(start, stop):
            m = messages[i]
            target = index.get(m.reply_to or "", -1)
            if m.system:
                parent = i
            elif 0 <= target < i:  # an explicit reply wins, however far back
                parent = target
            else:
                scores = state.fill(i, rows[i - start]) @ pair_w
                scores = np.where(features.valid[i], scores, -np.inf)
                scores[state.idle(i, len(scores), IDLE_S)] = -np.inf
                best = int(np.argmax(scores))
                parent = i - best - 1 if scores[best] > own[i] else i
                if parent == i and replies is not None:
                    answered = replies.parent(i)
                    parent = answered if answered >= 0 else i
            if parent < floor:
                raise OutOfWindow(f"message {i} continues {parent}, before {floor}")
            state.join(i, parent)
            parents.append(parent)
    return parents


def joined(parents: Sequence[int]) -> list[list[int]]:
    """The conversations the parent links make, as indices in order: each message joins its
    parent's (a parent at or after it: it starts its own)."""
    root = list(range(len(parents)))
    groups: dict[int, list[int]] = defaultdict(list)
    for i, p in enumerate(parents):
        root[i] = root[p] if p < i else i
        groups[root[i]].append(i)
    return list(groups.values())


def components(messages: Sequence[Message], parents: Sequence[int]) -> list[list[str]]:
    """The conversations the parent links make (:func:`joined`), as unit ids."""
    return [[messages[i].unit_id for i in c] for c in joined(parents)]


def group_conversations(
    messages: Sequence[Message],
    *,
    model: LinkModel | None = None,
    embed: Embed | None = None,
    responses: bool = True,
) -> list[list[str]]:
    """The conversations of ``messages`` (any channels): lists of unit ids, each in time order.

    See :func:`link_parents` for the arguments.
    """
    model = model or LinkModel.load()
    out: list[list[str]] = []
    for channel in by_channel(messages).values():
        parents = link_parents(channel, model=model, embed=embed, responses=responses)
        out.extend(components(channel, parents))
    return out


def five_minute_rule(
    messages: Sequence[Message], *, minutes: float = 5.0, system_alone: bool = False
) -> list[list[str]]:
    """The channel-wide baseline: a message less than ``minutes`` after the channel's previous
    message joins that message's conversation. System lines count as messages like any other,
    unless ``system_alone``: then each is a conversation of its own and the others skip them."""
    out: list[list[str]] = []
    for channel in by_channel(messages).values():
        parents = []
        last = -1  # the channel's previous message the rule looks at
        for i, m in enumerate(channel):
            if system_alone and m.system:
                parents.append(i)
                continue
            near = last >= 0 and m.timestamp - channel[last].timestamp < minutes * 60
            parents.append(last if near else i)
            last = i
        out.extend(components(channel, parents))
    return out
