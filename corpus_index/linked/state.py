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
        self.conversation = np.arange(n)
        self.last_index: dict[int, int] = {}
        self.authors: dict[int, set[int]] = {}
        self.size: dict[int, int] = {}

    def fill(self, i: int, row: np.ndarray) -> np.ndarray:
        """Write the conversation features of ``i``'s candidates into ``row`` (its pair
        features, ``[window, len(PAIR_FEATURES)]``; messages before ``i`` must have joined)
        and return it."""
        f = self.features
        topic: dict[int, float] = {}  # conversation -> i's best similarity to one of its messages
        for k in range(1, min(row.shape[0], i) + 1):
            if f.valid[i, k - 1]:
                c = int(self.conversation[i - k])
                topic[c] = max(topic.get(c, 0.0), float(f.topic[i, k - 1]))
        for k in range(1, row.shape[0] + 1):
            j = i - k
            if j < 0:
                break
            if not f.valid[i, k - 1]:
                continue
            c = int(self.conversation[j])
            last = self.last_index.get(c, j)
            gap = max(f.times[i] - f.times[last], 0.0) / f.pace[i]
            row[k - 1, CONVERSATION_COLUMNS] = (
                math.log1p(gap),
                last == j,
                f.author[i] in self.authors.get(c, ()),
                math.log1p(self.size.get(c, 1)),
                topic[c],
            )
        return row

    def join(self, i: int, parent: int) -> None:
        """``i`` continues the conversation of ``parent`` (itself: it starts one)."""
        c = int(self.conversation[parent]) if parent != i else i
        self.conversation[i] = c
        self.last_index[c] = i
        self.size[c] = self.size.get(c, 0) + 1
        if self.features.author[i] >= 0:
            self.authors.setdefault(c, set()).add(int(self.features.author[i]))
