"""Replies a message makes without saying so: the earlier message of its channel it answers
by how people write, read when the link model would have it start a conversation of its own
(see :func:`~corpus_index.linked.conversations.decode`).

The link weights are fitted on irc, where a reply comes seconds after what it answers and a
speaker silent for an hour is someone arriving. A staff chat answers a question hours later, by
someone back on shift after days away, in a few words that share nothing with the question
("not me, I parked it out front", "I'll take her"); an e-mail thread answers days later. Two
signs of a reply are read there, each looking back only at earlier messages:

- **an e-mail reply** (subject ``Re: ...``, ``Fwd: ...``) continues the latest earlier message
  of its thread with the same subject, however far back;
- **a response to an open question**: the best of the questions in the window before it
  (:data:`~corpus_index.linked.questions.ANSWER_WINDOW_S` at most, asked by someone else) that
  it answers by :func:`~corpus_index.linked.questions.answer_score` (answer patterns that fit
  the question, being addressed or named, being the first reply, topic similarity) at
  :data:`RESPONSE_MIN_SCORE` or more (a call for people, "Still need someone for the 26th
  PM", "Say here if you want in", is a who-question, answered by each who takes it: a reply
  is the first of its author's, not the first of all, and a one-word "in" or "me" names
  someone), or the question it is the first reply to when it says
  it does not know ("no idea", "not me"): a reply that does not answer still belongs to the
  exchange; failing both, the latest question offering alternatives ("Chicken or pork?")
  whose alternatives it names ("Chicken is easier to mince for her"), the way such a question
  is answered.

Neither overrides the model when it finds a parent: they only keep a reply from starting a
conversation of its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from corpus_index.linked.features import ChannelFeatures
from corpus_index.linked.messages import Message, thread_subject
from corpus_index.linked.questions import (
    ANSWER_WINDOW_S,
    CONVERSATIONAL,
    Question,
    answer_score,
    not_an_answer,
    question_of,
)
from corpus_index.linked.topic import STOPWORDS, tokens

# the rule pass's version, in the digest of the links it made (corpus_index.linked.relink): a
# change to what it reads or decides must change it, so the links kept from a run are decided
# again
RESPONSES_VERSION = "responses-v2"
# an answer must score this by answer_score to join its question's conversation: above the
# answer finder's own bar (0.3, where irc-disentanglement dev lost 2 points of F: a channel
# answers many questions at once, and a pattern-only answer is often another's)
RESPONSE_MIN_SCORE = 0.5
_ALTERNATIVES = re.compile(r"([a-z][a-z'-]+)\s+or\s+([a-z][a-z'-]+)\s*\?", re.IGNORECASE)


def alternatives(text: str) -> frozenset[str]:
    """The words a question offers to choose between (``"Chicken or pork?"`` -> chicken, pork;
    stop words and words under three letters left out)."""
    found = (w.lower() for pair in _ALTERNATIVES.findall(text) for w in pair)
    return frozenset(w for w in found if len(w) > 2 and w not in STOPWORDS)


class Responses:
    """The replies of one channel's messages (in the channel's order) that the link model
    may miss (see the module's description)."""

    def __init__(self, messages: Sequence[Message], features: ChannelFeatures) -> None:
        self.messages = messages
        self.features = features
        self._asks: dict[int, tuple[Question | None, frozenset[str]]] = {}  # read when needed
        self._thread: list[int] = []  # the latest earlier message of its subject, if a reply
        latest: dict[str, int] = {}
        for i, m in enumerate(messages):
            subject, is_reply = thread_subject(m.title) if m.title else ("", False)
            self._thread.append(latest.get(subject, -1) if is_reply else -1)
            if subject:
                latest[subject] = i

    def parent(self, i: int) -> int:
        """The index of the earlier message ``i`` replies to by the signs above, or -1."""
        if self._thread[i] >= 0:
            return self._thread[i]
        return self._answered(i)

    def _asked(self, j: int) -> tuple[Question | None, frozenset[str]]:
        """The question message ``j`` asks (None if none) and the alternatives it offers."""
        if j not in self._asks:
            m = self.messages[j]
            conversational = m.source in CONVERSATIONAL and not m.system
            ask = question_of(m.text) if conversational else None
            offered = alternatives(m.text) if conversational and "?" in m.text else frozenset()
            self._asks[j] = (ask, offered)
        return self._asks[j]

    def _answered(self, i: int) -> int:
        f, m = self.features, self.messages[i]
        best, best_score = -1, RESPONSE_MIN_SCORE
        named = -1  # the latest question whose alternatives i names
        words: set[str] | None = None
        between: set[int] = set()  # authors of the replies between the question and i
        for k in range(1, min(f.window, i) + 1):
            j = i - k
            if not f.valid[i, k - 1] or f.times[i] - f.times[j] > ANSWER_WINDOW_S:
                continue
            q = self.messages[j]
            ask, options = self._asked(j)
            if options and named < 0 and f.author[j] != f.author[i]:
                words = set(tokens(m.text)) if words is None else words
                named = j if options & words else -1
            if ask is not None and q.author != m.author:
                # a call for people ("who's on?", "say here if you want in") is answered by
                # each who takes it: the first reply of its author, not the first reply
                first = (
                    int(f.author[i]) not in between
                    if ask.kind == "who"
                    else between <= {int(f.author[j])}
                )
                if first and not_an_answer(m.text):
                    return j  # "no idea": the first reply to it, not an answer
                sim = float(f.topic[i, k - 1])
                score = answer_score(q, ask, m, first_reply=first, sim=sim)
                if score > best_score:
                    best, best_score = j, score
            if not not_an_answer(q.text):
                between.add(int(f.author[j]))
        return best if best >= 0 else named
