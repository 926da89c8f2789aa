"""The conversations of a channel as they are decided, message by message, and the
conversation-level pair features they give a candidate."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from corpus_index.linked.features import CONVERSATION_COLUMNS, ChannelFeatures

_NONE = np.zeros(0, dtype=np.int64)  # no position


class ConversationState:
    """The conversations of a channel decided so far, as each message is: what the
    conversation-level features of a candidate ``j`` read (the time since the last message of
    ``j``'s conversation, not the channel's, in the channel's pace; whether ``j`` is that last
    message; whether the author of ``i`` has taken part in it; its size; how close ``i`` comes in topic to any of
    its messages in the window, so a reply that shares words with the conversation's opening
    question, not with the message just before, still reads as on topic)."""

    def __init__(self, features: ChannelFeatures) -> None:
        self.features = features
        n = len(features.times)
        # as arrays, so a message's candidates are filled in a few array operations (a Python
        # loop over its window of candidates was most of a channel's decoding); a
        # conversation is named by its first message, so its last message and size are
        # indexed by message too
        self._conversation = np.arange(n, dtype=np.int64)  # each message's conversation
        self._last = np.arange(n, dtype=np.int64)  # each conversation's last message
        self._size = np.ones(n, dtype=np.float64)  # each conversation's messages
        self._best = np.zeros(n, dtype=np.float64)  # scratch: per conversation, for fill
        self._authors: list[int] = features.author.tolist()
        self._author_conversations: dict[int, set[int]] = {}  # the conversations of each author

    def fill(self, i: int, row: np.ndarray) -> np.ndarray:
        """Write the conversation features of ``i``'s candidates into ``row`` (its pair
        features, ``[window, len(PAIR_FEATURES)]``; messages before ``i`` must have joined)
        and return it."""
        f = self.features
        reach = min(row.shape[0], i)  # candidates i - 1 ... i - reach
        if reach <= 0:
            return row
        ks = np.flatnonzero(f.valid[i, :reach])  # candidate k - 1 for each valid k
        if not len(ks):
            return row
        js = i - 1 - ks
        conversation = self._conversation[js]
        # per conversation, i's best similarity to one of its candidates (0 at least)
        best = self._best
        best[conversation] = 0.0
        np.maximum.at(best, conversation, f.topic[i, ks])
        last = self._last[conversation]
        gap = np.maximum(f.times[i] - f.times[last], 0.0) / float(f.pace[i])
        mine = self._author_conversations.get(self._authors[i], ())
        values = np.empty((len(ks), 5), dtype=np.float64)
        values[:, 0] = np.log1p(gap)
        values[:, 1] = last == js
        values[:, 2] = [c in mine for c in conversation.tolist()]
        values[:, 3] = np.log1p(self._size[conversation])
        values[:, 4] = best[conversation]
        row[ks, CONVERSATION_COLUMNS] = values
        return row

    def idle(self, i: int, reach: int, seconds: float) -> np.ndarray:
        """Which of ``i``'s candidates ``i - 1`` ... ``i - reach`` belong to a conversation
        silent for more than ``seconds`` when ``i`` is written, as positions in that order
        (``k - 1`` for candidate ``i - k``)."""
        f = self.features
        # a conversation's last message is at or after each of its messages: with the
        # furthest candidate within ``seconds`` of ``i``, no conversation is (most messages)
        if f.times[i] - f.times[max(i - reach, 0)] <= seconds:
            return _NONE
        js = np.arange(i - 1, i - 1 - reach, -1)
        last = self._last[self._conversation[np.maximum(js, 0)]]
        return np.flatnonzero(f.times[i] - f.times[last] > seconds)

    def join(self, i: int, parent: int) -> None:
        """``i`` continues the conversation of ``parent`` (itself: it starts one)."""
        c = int(self._conversation[parent]) if parent != i else i
        self._conversation[i] = c
        if c != i:
            self._last[c] = i
            self._size[c] += 1
        author = self._authors[i]
        if author >= 0:
            self._author_conversations.setdefault(author, set()).add(c)

    @classmethod
    def seeded(
        cls,
        features: ChannelFeatures,
        first: int,
        tail: Sequence[int],
        conversations: Iterable[tuple[int, int, float, Iterable[int]]],
    ) -> ConversationState:
        """The state of a slice of a channel after its messages before ``first + len(tail)``,
        known from the run that decided them: ``tail`` names the conversation of each of
        the messages from ``first`` on (the last ones, the only ones a later message may
        continue), and ``conversations`` gives each of theirs as (its name, its last message,
        its size, the ids of its authors), a conversation being named by one of its messages
        in the slice. What the messages before ``first`` joined is read by nothing a later
        message decides."""
        state = cls(features)
        state._conversation[first : first + len(tail)] = tail
        for c, last, size, authors in conversations:
            state._last[c] = last
            state._size[c] = size
            for a in authors:
                state._author_conversations.setdefault(a, set()).add(c)
        return state
