"""Features of "message i continues from earlier message j" and of "message i starts a new
conversation", for every message of one channel and its ``window`` predecessors.

They are what a person reads a chat by: whether ``i`` replies to ``j`` explicitly or names its
author, whether the same author goes on, how far back ``j`` is (in messages and in time),
whether ``j``'s author has moved on since, and how much the two share in topic.

Time is measured in the channel's own pace (:func:`channel_pace`: how fast its recent messages
came while people were talking), never in minutes: six minutes is a long silence in a busy
support channel where lines come seconds apart, and an immediate answer in a staff chat where
they come minutes to hours apart. Weights fitted on one kind of channel so carry over to
another.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from corpus_index.linked.messages import Message, addressed_word
from corpus_index.linked.topic import Embed, band_similarity, tokens

# the features' version, in the digest of the links they decided (corpus_index.linked.relink):
# a change to what a feature reads must change it, so links kept from a run are decided again
# (v2: a candidate's mentions are read when a channel is re-linked from a later start, as a
# whole channel's linking reads them; v3: a message weighed by the TF-IDF document frequencies
# of the messages up to it, see corpus_index.linked.topic.trailing_tfidf)
FEATURES_VERSION = "features-v3"

PAIR_FEATURES = (
    "lines_1",
    "lines_2",
    "lines_3",
    "lines_4_5",
    "lines_6_10",
    "lines_11_20",
    "lines_21_up",
    "log_lines",
    "gap_under_6p",
    "gap_6_11p",
    "gap_12_23p",
    "gap_24_47p",
    "gap_48p_up",
    "log_gap_paces",
    "i_addresses_j_author",
    "i_mentions_j_author",
    "j_addresses_i_author",
    "same_author",
    "i_addresses_other",
    "j_addresses_other",
    "j_author_silent_since",
    "i_author_spoke_since",
    "topic_similarity",
    "j_is_question",
    "explicit_reply",
    "i_addresses_j_author_silent_since",
    "j_addresses_i_and_i_addresses_none",
    "j_mentions_i_author",
    # of j's conversation as decided so far (filled in by state.ConversationState, in order)
    "conversation_log_gap_paces",
    "j_is_conversation_latest",
    "i_author_in_conversation",
    "conversation_log_size",
    "conversation_topic_similarity",
)
CONVERSATION_COLUMNS = slice(28, 33)
SELF_FEATURES = (
    "bias",
    "is_question",
    "addresses_someone",
    "mentions_someone",
    "log_gap_channel_paces",
    "log_gap_author_paces",
    "author_first_message",
    "greeting",
    "asks_anyone",
    "log_tokens",
    "best_topic_similarity",
)
_GREETING = frozenset({"hi", "hello", "hey", "hiya", "yo", "howdy", "morning", "evening"})
_ANYONE = frozenset({"anyone", "anybody", "somebody", "someone", "everyone", "guys", "all"})
PACE_GAPS = 20  # the channel's pace is read from its last this many gaps
PACE_QUANTILE = 25.0  # percent: the pace is this quantile of them
PACE_FLOOR_S = 10.0  # no faster than a message every ten seconds (a clock in whole minutes
# gives a busy channel gaps of 0)
AUTHOR_GAP_CAP = 360.0  # paces: an author's silence longer than this reads as their first word


@dataclass(frozen=True, slots=True)
class ChannelFeatures:
    """Features of one channel's messages, in the channel's order.

    The new-conversation features and which candidates are possible are held for every
    message; the pair features (``[rows, window, len(PAIR_FEATURES)]``, the bulk) are computed
    for a range of messages at a time by :meth:`pair_rows`, so a long channel is decided in
    blocks without ever holding all of them.
    """

    window: int
    self_: np.ndarray  # float32 [n, len(SELF_FEATURES)]: i starts a conversation
    valid: np.ndarray  # bool [n, window]: i - k - 1 exists, and neither message is a system one
    author: np.ndarray  # int64 [n]: the author's id in the channel, -1 for system messages
    times: np.ndarray  # float64 [n]: seconds
    pace: np.ndarray  # float64 [n]: the channel's pace before each message, in seconds
    addressee: np.ndarray  # int64 [n]: the id of the author a message starts with, or -1
    mentioned: tuple[frozenset[int], ...]  # ids of the authors each message names
    prev_same: np.ndarray  # int64 [n]: the author's previous message, -1 if none
    next_same: np.ndarray  # int64 [n]: the author's next message, n if none
    reply: np.ndarray  # int64 [n]: the message it explicitly replies to, -1 if none
    question: np.ndarray  # bool [n]
    topic: np.ndarray  # float32 [n, window]: similarity to the message k back
    # each author's id by their name as the channel keys it (stripped, lower case)
    ids: Mapping[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.times)

    def pair_rows(self, start: int, stop: int) -> np.ndarray:
        """Pair features of messages ``start`` to ``stop`` (excluded): ``[i - start, k - 1]``
        describes "message i continues from message i - k"; the conversation columns are 0
        (a :class:`~corpus_index.linked.state.ConversationState` fills them)."""
        idx = np.arange(start, stop)
        pair = np.zeros((len(idx), self.window, len(PAIR_FEATURES)), dtype=np.float32)
        author, addressee = self.author[idx], self.addressee[idx]
        times, pace = self.times[idx], self.pace[idx]
        for k in range(1, self.window + 1):
            j = idx - k
            jj = np.where(j >= 0, j, 0)
            f = pair[:, k - 1]
            f[:, _bucket_lines(k)] = 1.0
            f[:, 7] = math.log1p(k)
            gap = np.maximum(times - self.times[jj], 0.0) / pace
            f[:, 8] = gap < 6
            f[:, 9] = (gap >= 6) & (gap < 12)
            f[:, 10] = (gap >= 12) & (gap < 24)
            f[:, 11] = (gap >= 24) & (gap < 48)
            f[:, 12] = gap >= 48
            f[:, 13] = np.log1p(gap)
            aj = self.author[jj]
            f[:, 14] = (addressee >= 0) & (addressee == aj)
            f[:, 15] = [aj[r] in self.mentioned[i] for r, i in enumerate(idx)]
            f[:, 16] = (self.addressee[jj] >= 0) & (self.addressee[jj] == author)
            f[:, 17] = (author >= 0) & (author == aj)
            f[:, 18] = (addressee >= 0) & (addressee != aj)
            f[:, 19] = (self.addressee[jj] >= 0) & (self.addressee[jj] != author)
            f[:, 20] = self.next_same[jj] >= idx
            f[:, 21] = self.prev_same[idx] > jj
            f[:, 22] = self.topic[idx, k - 1]
            f[:, 23] = self.question[jj]
            f[:, 24] = self.reply[idx] == j
            f[:, 25] = f[:, 14] * f[:, 20]
            f[:, 26] = f[:, 16] * (addressee < 0)
            f[:, 27] = [author[r] >= 0 and author[r] in self.mentioned[j] for r, j in enumerate(jj)]
            f[~self.valid[idx, k - 1]] = 0.0
        return pair


class _Names:
    """Authors of a channel under the forms a message may name them by (whole, first word)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.forms: dict[str, int] = {}

    def id_of(self, name: str) -> int:
        key = author_key(name)
        if key not in self.ids:
            self.ids[key] = len(self.ids)
        return self.ids[key]

    def seen(self, name: str) -> int:
        """Record that ``name`` has written in the channel; its id."""
        author = self.id_of(name)
        key = author_key(name)
        if key:
            self.forms.setdefault(key, author)
            first = key.split()[0]
            if first != key and len(first) > 1:
                self.forms.setdefault(first, author)
        return author


def author_key(name: str) -> str:
    """An author's name as a channel tells its authors apart (what :class:`_Names` keys)."""
    return name.strip().lower()


@dataclass(frozen=True, slots=True)
class Earlier:
    """What the features of a channel's later messages read of its messages before a slice of
    it (see :func:`channel_features`), kept from the run that linked them.

    Args:
        authors: the keys (:func:`author_key`) of the authors who wrote before the slice, in
            the order they first wrote.
        last: each of them by the time of their last message before the slice.
    """

    authors: Sequence[str] = ()
    last: Mapping[str, float] = field(default_factory=dict)


def _addressee(text: str, names: _Names) -> int:
    return names.forms.get(addressed_word(text), -1)


def channel_features(
    messages: Sequence[Message],
    *,
    window: int,
    embed: Embed | None = None,
    start: int = 0,
    earlier: Earlier | None = None,
) -> ChannelFeatures:
    """Features of ``messages`` (one channel, in order) against their ``window`` predecessors.

    An author is named when a message starts with their name (``nick: ...``, the irc way of
    addressing someone) or has them among its ``mentions``; only people who have written in
    the channel before count, so a common word is rarely taken for a name.

    Every feature of a message reads only the messages before it (and, for a channel's first
    messages, the document frequencies of those first messages, see
    :func:`~corpus_index.linked.topic.band_similarity`), so with ``start`` only the messages
    from ``start`` on get their topic and new-conversation features (the rows before are 0),
    and their ``window`` predecessors their mentions (a candidate's mentions are a pair
    feature): what re-linking the end of a channel needs.

    With ``earlier``, ``messages`` are the end of a channel, and ``earlier`` says what came
    before them: who had written (a message names them) and when each last wrote (the time
    since an author's previous message). The rows from ``start`` on are then those of the
    whole channel where the slice holds the :data:`~corpus_index.linked.topic.TOPIC_BLOCK`
    messages that weigh their words and the gaps that give the channel's pace (see
    :mod:`corpus_index.linked.relink`, which cuts the slice).
    """
    n = len(messages)
    names = _Names()
    for key in earlier.authors if earlier is not None else ():
        names.seen(key)
    author = np.empty(n, dtype=np.int64)
    addressee = np.full(n, -1, dtype=np.int64)
    mentioned: list[frozenset[int]] = []
    for i, m in enumerate(messages):
        addressee[i] = -1 if m.system else _addressee(m.text, names)
        if i < start - window:
            mentioned.append(frozenset())
            author[i] = -1 if m.system or not m.author else names.seen(m.author)
            continue
        said = {names.forms[t] for t in tokens(m.text) if t in names.forms}
        said.update(names.id_of(x) for x in m.mentions)
        if addressee[i] >= 0:
            said.add(int(addressee[i]))
        mentioned.append(frozenset(said))
        author[i] = -1 if m.system or not m.author else names.seen(m.author)
    system = np.array([m.system for m in messages], dtype=bool)
    times = np.array([m.timestamp for m in messages], dtype=np.float64)
    pace = channel_pace(times, system)
    prev_same, next_same = _neighbours(author)
    # the time of the author's message before the slice, for a message whose author has not
    # written since the slice began (NaN: none, or no slice)
    before = np.full(n, np.nan)
    if earlier is not None:
        first_here = (prev_same[start:] < 0) & (author[start:] >= 0)
        for i in (np.flatnonzero(first_here) + start).tolist():
            before[i] = earlier.last.get(author_key(messages[i].author), np.nan)
    unit_index = {m.unit_id: i for i, m in enumerate(messages)}
    reply = np.array([unit_index.get(m.reply_to or "", -1) for m in messages], dtype=np.int64)
    topic = band_similarity([m.text for m in messages], window, embed=embed, start=start)

    valid = np.zeros((n, window), dtype=bool)
    idx = np.arange(n)
    for k in range(1, window + 1):
        j = idx - k
        ok = (j >= 0) & ~system
        ok[ok] &= ~system[j[ok]]
        valid[:, k - 1] = ok
    return ChannelFeatures(
        window=window,
        self_=_self_features(
            messages,
            author,
            addressee,
            mentioned,
            times,
            pace,
            prev_same,
            before,
            topic,
            valid,
            start,
        ),
        valid=valid,
        author=author,
        times=times,
        pace=pace,
        addressee=addressee,
        mentioned=tuple(mentioned),
        prev_same=prev_same,
        next_same=next_same,
        reply=reply,
        question=np.array(["?" in m.text for m in messages], dtype=bool),
        topic=topic,
        ids=names.ids,
    )


def channel_pace(times: np.ndarray, system: np.ndarray) -> np.ndarray:
    """Per message, the channel's pace just before it, in seconds: the lower quartile
    (:data:`PACE_QUANTILE`) of the last :data:`PACE_GAPS` gaps between consecutive chat
    messages before it (system lines are skipped), at least :data:`PACE_FLOOR_S`. It reads
    only earlier messages, like every feature.

    A low quantile, not a mean or the median: it is the pace of an exchange while it lasts.
    The nights and the hours between a staff chat's exchanges are most of its gaps, and would
    make a reply four minutes after a question look instant and one a day later look prompt.
    """
    chat = ~system
    gaps = np.diff(times[chat])
    paces = np.full(len(gaps) + 1, PACE_FLOOR_S)  # the pace once c gaps have been seen
    for c in range(1, min(PACE_GAPS, len(gaps) + 1)):
        paces[c] = np.percentile(gaps[:c], PACE_QUANTILE)
    if len(gaps) >= PACE_GAPS:
        paces[PACE_GAPS:] = np.percentile(
            sliding_window_view(gaps, PACE_GAPS), PACE_QUANTILE, axis=1
        )
    chat_before = np.cumsum(chat) - chat  # chat messages before each message
    out: np.ndarray = np.maximum(paces[np.maximum(chat_before - 1, 0)], PACE_FLOOR_S)
    return out


def _bucket_lines(k: int) -> int:
    if k <= 3:
        return k - 1
    if k <= 5:
        return 3
    if k <= 10:
        return 4
    return 5 if k <= 20 else 6


def _neighbours(author: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each message, the index of its author's previous message (-1 if none) and next
    one (n if none); system messages (author -1) have neither."""
    n = len(author)
    prev = np.full(n, -1, dtype=np.int64)
    nxt = np.full(n, n, dtype=np.int64)
    last: dict[int, int] = {}
    for i, a in enumerate(author.tolist()):
        if a < 0:
            continue
        if a in last:
            prev[i] = last[a]
            nxt[last[a]] = i
        last[a] = i
    return prev, nxt


def _self_features(
    messages: Sequence[Message],
    author: np.ndarray,
    addressee: np.ndarray,
    mentioned: list[frozenset[int]],
    times: np.ndarray,
    pace: np.ndarray,
    prev_same: np.ndarray,
    before: np.ndarray,
    topic: np.ndarray,
    valid: np.ndarray,
    first: int,
) -> np.ndarray:
    n = len(messages)
    out = np.zeros((n, len(SELF_FEATURES)), dtype=np.float32)
    chat_before = -1
    for i, m in enumerate(messages):
        if i < first:
            chat_before = chat_before if m.system else i
            continue
        words = tokens(m.text)
        cap = AUTHOR_GAP_CAP  # in paces of the channel before i
        gap_channel = (times[i] - times[chat_before]) / pace[i] if chat_before >= 0 else cap
        said_before = times[prev_same[i]] if prev_same[i] >= 0 else before[i]
        gap_author = cap if math.isnan(said_before) else (times[i] - said_before) / pace[i]
        out[i] = (
            1.0,
            "?" in m.text,
            addressee[i] >= 0,
            bool(mentioned[i] - {author[i]}),
            math.log1p(max(gap_channel, 0.0)),
            math.log1p(min(max(gap_author, 0.0), cap)),
            prev_same[i] < 0 and math.isnan(before[i]),
            bool(words) and words[0] in _GREETING,
            any(w in _ANYONE for w in words),
            math.log1p(len(words)),
            float(topic[i][valid[i]].max()) if valid[i].any() else 0.0,
        )
        if not m.system:
            chat_before = i
    return out
