"""The conversations of a channel as they are decided, message by message, and the
conversation-level pair features they give a candidate."""

from __future__ import annotations

import math

import numpy as np

from corpus_index.linked.features import CONVERSATION_COLUMNS, ChannelFeatures


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
        self.conversation: list[int] = list(range(n))
        self.last_index: dict[int, int] = {}
        self.authors: dict[int, set[int]] = {}
        self.size: dict[int, int] = {}
        # the features each candidate reads, as Python values (a NumPy scalar read per
        # candidate costs more than the arithmetic on it)
        self._times: list[float] = features.times.tolist()
        self._authors: list[int] = features.author.tolist()

    def fill(self, i: int, row: np.ndarray) -> np.ndarray:
        """Write the conversation features of ``i``'s candidates into ``row`` (its pair
        features, ``[window, len(PAIR_FEATURES)]``; messages before ``i`` must have joined)
        and return it."""
        f = self.features
        reach = min(row.shape[0], i)  # candidates i - 1 ... i - reach
        if reach <= 0:
            return row
        valid: list[bool] = f.valid[i, :reach].tolist()
        near: list[float] = f.topic[i, :reach].tolist()
        conversation = self.conversation
        topic: dict[int, float] = {}  # conversation -> i's best similarity to one of its messages
        for k in range(1, reach + 1):
            if valid[k - 1]:
                c = conversation[i - k]
                topic[c] = max(topic.get(c, 0.0), near[k - 1])
        times, now, pace = self._times, self._times[i], float(f.pace[i])
        author = self._authors[i]
        rows: list[int] = []
        values: list[tuple[float, bool, bool, float, float]] = []
        for k in range(1, reach + 1):
            if not valid[k - 1]:
                continue
            j = i - k
            c = conversation[j]
            last = self.last_index.get(c, j)
            gap = max(now - times[last], 0.0) / pace
            rows.append(k - 1)
            values.append(
                (
                    math.log1p(gap),
                    last == j,
                    author in self.authors.get(c, ()),
                    math.log1p(self.size.get(c, 1)),
                    topic[c],
                )
            )
        if rows:
            row[rows, CONVERSATION_COLUMNS] = values
        return row

    def join(self, i: int, parent: int) -> None:
        """``i`` continues the conversation of ``parent`` (itself: it starts one)."""
        c = self.conversation[parent] if parent != i else i
        self.conversation[i] = c
        self.last_index[c] = i
        self.size[c] = self.size.get(c, 0) + 1
        if self._authors[i] >= 0:
            self.authors.setdefault(c, set()).add(self._authors[i])
