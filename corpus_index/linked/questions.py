"""Questions and the later units that answer them (seed "Linked Context" §5.3).

A unit of a conversational source (chat, SMS, e-mail) holds a question when one of its sentences
ends in a question mark, opens with an interrogative ("who", "is", "can we"), or asks in so many
words ("does anyone know", "let me know"). Its answer is looked for among the later units of the
same channel or thread by someone else, within a window (wider when re-processed) and at most
``MAX_CANDIDATES`` of them (explicit replies are read however late), and among the units of
other channels at the same place when they are on the same topic, scored by:

- an explicit reply to the question (strong, but a reply can answer the thread's other question);
- the asker addressed by name, or the answerer named in the question;
- answer patterns that fit the question: "yes"/"no" for a yes/no question, "me"/"I'll" for a
  "who", "found it", "it's in", a time or number for the others;
- no answer patterns ("no idea", "not sure", "think it's ...", "checking"), acknowledgments;
- topic similarity (TF-IDF over the collection), being the first reply (after any "no idea"),
  and the time passed.

Pairs are chosen best first, each question and each answer at most once. An optional
:class:`AnswerVerifier` (an LLM, say) may veto a pair; none is used by default (no network).

A run given what the last one scored (:class:`~corpus_index.linked.lastrun.LastRun`) reads
the candidates of only the questions a change can reach: a question whose unit is as it was
keeps its scored answers unread when no unit that is new, or weighed by other TF-IDF
frequencies than last time, lies in its channel or at its place from its time to the end of
its window, or replies to it, and no unit edited or taken out since lay there or replied to
it last time. Its candidates are then the same units with the same vectors, so its key is
the one it was kept by, and what it asks is the same: its text is read for it only when
its group is made (:attr:`QaLink.asked`). The pairs are chosen again over every question,
as without it.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple, Protocol

from corpus_index.linked.lastrun import NOT_ASKED, UNKEYED, LastRun
from corpus_index.linked.memo import Memo, UnitParts
from corpus_index.linked.messages import Message, in_time_order, place_of
from corpus_index.linked.people import given, name_key
from corpus_index.linked.records import Carried, Carry, Group, Member
from corpus_index.linked.settled import question_mark
from corpus_index.linked.similarity import Similarity

CONVERSATIONAL = frozenset({"discord_chat", "sms_message", "email_thread", "chat", ""})
ANSWER_WINDOW_S = 48 * 3600.0  # a first pass looks this far after a question
MIN_SCORE = 0.3  # an answer must score at least this
MAX_CANDIDATES = 40  # the others' messages after a question read for its answer (and replies)
# an answer in another channel or thread at the same place must be on the same topic (which
# then counts twice, being all that links them) and counts for less than one where it was asked
ELSEWHERE_MIN_SIM = 0.25
ELSEWHERE_PENALTY = 0.15
PRIORITY_OPEN = 8  # an unanswered question (seed §7.1)
TIMEOUT_S = 7 * 24 * 3600.0  # after a week unanswered a question is given up (``timeout``)

_WH = frozenset({"who", "whose", "whom", "what", "when", "where", "which", "why", "how"})
# a question without its question mark: "can we get ...", "Tom can you drive", "who's on"
_OPENS = re.compile(
    r"^(?:[A-Z][a-z]+,?\s+)?(?:(?:can|could|would|will|do|does|did|is|are|has|have|should)"
    r"\s+(?:you|we|i|someone|anyone|anybody|somebody|he|she|they|it|there)\b"
    r"|(?:who|what|when|where|which|how)(?:'s|\s+(?:is|are|was|can|do|does|did|will|should))\b)",
)
_ASKS = re.compile(
    r"\b(?:(?:does|do) any(?:one|body) know|please (?:confirm|advise)"
    r"|any(?:one|body) (?:seen|got|know))\b",
    re.IGNORECASE,
)
# a call for people, asked without a question: "Still need someone for the 26th PM", "Say here
# if you want in", "Anyone free Saturday": who answers it names themselves ("me", "in")
_CALLS = re.compile(
    r"\b(?:(?:still |we )?need (?:someone|somebody|anyone|a volunteer|volunteers|a hand)"
    r"|looking for (?:someone|somebody|a volunteer|volunteers)|say (?:here|so) if"
    r"|let (?:me|us) know if you(?:'re| are| can| want)|any takers"
    r"|any(?:one|body) (?:free|keen|available|able|around))\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
_WORD = re.compile(r"[a-z0-9']+")

_YES_NO = re.compile(r"^(?:yes|yep|yeah|yup|no|nope|nah|sure|of course|definitely)\b", re.I)
_SELF = re.compile(
    r"^(?:me\b|i'll\b|i will\b|i can\b|i'm on\b|i am on\b|we'll\b|count me|i'm in\b|in\b(?!\s+\w))",
    re.I,
)
_FACT = re.compile(
    r"^(?:found|it's|its|it is|they're|they are|it was|in the|on the|top|under|behind|at|"
    r"from|since|closed|open|both|only|picked|arrived|fixed|done|booked|rang|\d)",
    re.IGNORECASE,
)
_NOT_ANSWER = re.compile(
    r"\b(?:no idea|not sure|not me|don't know|dunno|i don't have|no clue|checking|will check|"
    r"let me check|i'll check)\b|^(?:think|i think|maybe|not in)\b",
    re.IGNORECASE,
)
_DOES = re.compile(
    r"^(?:ok|okay|sure|done|added|will do|on it|sorted|no worries|no problem|booked|got it)\b",
    re.IGNORECASE,
)
_ACK = re.compile(
    r"^(?:thanks?|thank you|ta|cheers|legend|great|good|love it|nice|brilliant|wonderful)\b"
    r"[\W\s]*(?:\w+[\W\s]*)?$",
    re.IGNORECASE,
)
_GREETING = re.compile(r"^(?:hi|hey|hello|dear|morning|g'day)\b[\s,]*", re.IGNORECASE)


class Question(NamedTuple):
    """What a question asks: ``kind`` ``who``, ``wh`` (what, where, when ...) or ``polar``
    (yes or no), and the sentence that asks it."""

    kind: str
    sentence: str


@lru_cache(maxsize=65536)
def question_of(text: str) -> Question | None:
    """The (last) question ``text`` asks, or None when it asks none."""
    found: Question | None = None
    for raw in _SENTENCE.findall(text):
        sentence = raw.strip()
        head = [w.split("'")[0] for w in _WORD.findall(sentence.lower())[:3]]
        if not head:
            continue
        opens = _OPENS.match(sentence[:1].lower() + sentence[1:]) or _OPENS.match(sentence)
        call = _CALLS.search(sentence)
        if sentence.endswith("?") or opens or _ASKS.search(sentence) or call:
            if call or any(w in ("who", "whose", "whom") for w in head):
                kind = "who"
            elif any(w in _WH for w in head):
                kind = "wh"
            else:
                kind = "polar"
            found = Question(kind, sentence)
    return found


class AnswerVerifier(Protocol):
    """Judges whether ``answer`` answers ``question`` (an LLM could): True, False, or None
    for no opinion (the heuristic score then decides alone). ``identity``: what its verdicts
    depend on beyond the two messages (a model and its server, say); with a memo, verdicts
    are kept by it and the pair (:func:`find_answers`)."""

    @property
    def identity(self) -> str: ...

    def verify(self, question: Message, answer: Message) -> bool | None: ...


@dataclass(frozen=True, slots=True)
class QaLink:
    """A question and the unit that answers it (None: not answered yet), with the score;
    ``text``: the question's, what it asks read from it when asked for (:attr:`asked`)."""

    question: str
    answer: str | None
    score: float
    text: str

    @property
    def asked(self) -> Question:
        """What the question asks (:func:`question_of` of its text, which asks one)."""
        ask = question_of(self.text)
        assert ask is not None, f"{self.question} asks no question"
        return ask

    @property
    def sentence(self) -> str:
        """The sentence that asks it."""
        return self.asked.sentence


@lru_cache(maxsize=65536)
def _opening(text: str) -> tuple[str, str]:
    """The first word of ``text`` after any greeting, and its first 40 characters (lower)."""
    opening = _GREETING.sub("", text.strip())[:40].lower()
    words = _WORD.findall(opening.replace("@", " "))
    return (words[0] if words else "", text.lower()[:40])


@lru_cache(maxsize=65536)
def _forms(person: str) -> tuple[str, str]:
    """A person's given name and handle (``"Jane O."`` -> ``("jane", "janeo")``)."""
    return given(person), re.sub(r"[^a-z0-9]", "", person.lower().split("<")[0])


@lru_cache(maxsize=65536)
def _addresses(text: str, person: str) -> bool:
    """Whether ``text`` opens by addressing ``person`` (``"@DanK ..."``, ``"Jane, ..."``,
    ``"Hi Helen, ..."``)."""
    first, handle = _forms(person)
    word, head = _opening(text)
    if not word or not first:
        return False
    by_handle = len(word) >= 3 and handle.startswith(word)  # "Dan," to DanK, "Mike" to mikeb
    return word in (first, handle) or by_handle or (handle != "" and f"@{handle}" in head)


@lru_cache(maxsize=65536)
def _names(text: str, person: str) -> bool:
    """Whether ``text`` names ``person`` by their given name (as a word, capitalised)."""
    first = _forms(person)[0]
    return bool(first) and re.search(rf"\b{re.escape(first.capitalize())}\b", text) is not None


_name_key = lru_cache(maxsize=65536)(name_key)


def _sent_to(q: Message, m: Message) -> bool:
    """Whether ``q`` was sent to ``m``'s author (a recipient of an SMS or e-mail)."""
    if not q.mentions:
        return False
    key = _name_key(m.author)
    return any(r == m.author or (key and _name_key(r) == key) for r in q.mentions)


class _Traits(NamedTuple):
    """What an answer's text says whoever asked (see :func:`answer_score`)."""

    yes_no: bool
    does: bool
    self_: bool
    fact: bool
    bare_yes_no: bool
    ack: bool


@lru_cache(maxsize=65536)
def _traits(text: str) -> _Traits:
    """The patterns :func:`answer_score` reads of ``text`` (an answer, greeting and
    addressee taken off), once per text."""
    self_ = _SELF.match(text) is not None
    return _Traits(
        _YES_NO.match(text) is not None,
        _DOES.match(text) is not None,
        self_,
        _FACT.match(text) is not None or re.search(r"\d", text[:30]) is not None,
        re.match(r"^(?:yes|yep|yeah|no|nope)\b", text, re.I) is not None,
        # one word is an acknowledgement, but for someone naming themselves ("me", "in")
        _ACK.match(text) is not None or (len(_WORD.findall(text.lower())) <= 1 and not self_),
    )


@lru_cache(maxsize=65536)
def _said(text: str) -> tuple[str, bool, bool]:
    """An answer's text without its greeting, whether it says it does not know, and whether
    it asks a question itself."""
    return (
        _GREETING.sub("", text.strip()),
        _NOT_ANSWER.search(text) is not None,
        (question_of(text) is not None),
    )


def not_an_answer(text: str) -> bool:
    """Whether a reply says it does not know ("no idea", "not sure", "not me", "checking")."""
    return _said(text)[1]


@lru_cache(maxsize=65536)
def _unaddressed(text: str) -> str:
    """``text`` without the name it opens by addressing (``"Jane, ..."``)."""
    return re.sub(r"^@?\w+[,:]\s+", "", text)


def answer_score(q: Message, ask: Question, m: Message, *, first_reply: bool, sim: float) -> float:
    """How likely ``m`` answers question ``q`` (asking ``ask``); see the module's list."""
    text, not_answer, asks = _said(m.text)
    addressed = _addresses(m.text, q.author)
    traits = _traits(_unaddressed(text) if addressed else text)
    score = 0.0
    if m.reply_to == q.unit_id:
        score += 0.45
    elif m.reply_to:
        score -= 0.15
    if addressed:
        score += 0.25
    if _names(ask.sentence, m.author) or _addresses(q.text, m.author):
        score += 0.2
    if _sent_to(q, m):
        score += 0.2
    if ask.kind == "polar" and (traits.yes_no or traits.does):
        score += 0.3
    elif ask.kind == "who" and (traits.self_ or not traits.yes_no):
        score += 0.35 if traits.self_ else 0.05
    elif traits.fact:
        score += 0.2
    if ask.kind != "polar" and traits.bare_yes_no:
        score -= 0.15
    if not_answer:
        score -= 0.5
    if traits.ack:
        score -= 0.35
    if asks and m.reply_to != q.unit_id:
        score -= 0.1
    if first_reply:
        score += 0.2
    score += 0.5 * sim
    hours = max(m.timestamp - q.timestamp, 0.0) / 3600
    return score - 0.05 * math.log1p(hours)


def _elsewhere(q: Message, place: list[Message], window_s: float) -> list[Message]:
    """Others' messages at ``q``'s place in other channels within the window after it (the
    first ``MAX_CANDIDATES``); ``place`` is in time order."""
    start = bisect_right(place, q.timestamp, key=lambda m: m.timestamp)
    out: list[Message] = []
    for k in range(start, len(place)):  # by index: a slice would copy the place's future
        m = place[k]
        if m.timestamp - q.timestamp > window_s or len(out) >= MAX_CANDIDATES:
            break
        if m.channel != q.channel and m.author != q.author:
            out.append(m)
    return out


def _in_channel(
    q: Message,
    channel: Sequence[Message],
    start: int,
    replies: Sequence[Message],
    window_s: float,
) -> list[Message]:
    """Others' messages in ``q``'s channel within the window after it (the first
    ``MAX_CANDIDATES``), then the explicit replies to it however late (``channel`` in time
    order, its messages after ``q`` from ``start``). The window only: a channel's whole future
    is not read (nor copied) per question."""
    near: list[Message] = []
    for k in range(start, len(channel)):
        m = channel[k]
        if m.timestamp - q.timestamp > window_s or len(near) >= MAX_CANDIDATES:
            break
        if not m.system and m.author != q.author:
            near.append(m)
    seen = {m.unit_id for m in near}
    late = [
        m
        for m in replies
        if m.unit_id not in seen and m.author != q.author and m.timestamp >= q.timestamp
    ]
    return near + late


def _scored(
    q: Message,
    ask: Question,
    here: Sequence[Message],
    away: Sequence[Message],
    similarity: Similarity,
) -> list[tuple[float, float, str, str]]:
    """``(-score, seconds after, question, answer)`` of the candidates that score enough:
    ``here`` in the question's channel, ``away`` at its place elsewhere (on its topic only)."""
    out = []
    first = True
    for m, sim in zip(here, similarity.against(q.unit_id, [m.unit_id for m in here]), strict=True):
        s = answer_score(q, ask, m, first_reply=first, sim=sim)
        first = first and _said(m.text)[1]  # "no idea" is no reply
        if s >= MIN_SCORE:
            out.append((-s, m.timestamp - q.timestamp, q.unit_id, m.unit_id))
    for m, sim in zip(away, similarity.against(q.unit_id, [m.unit_id for m in away]), strict=True):
        if sim < ELSEWHERE_MIN_SIM:
            continue
        s = answer_score(q, ask, m, first_reply=False, sim=2 * sim) - ELSEWHERE_PENALTY
        if s >= MIN_SCORE:
            out.append((-s, m.timestamp - q.timestamp, q.unit_id, m.unit_id))
    return out


def _remembered(
    q: Message,
    ask: Question,
    here: Sequence[Message],
    away: Sequence[Message],
    similarity: Similarity,
    window_s: float,
    keyed: tuple[Memo, UnitParts] | None,
) -> tuple[list[tuple[float, float, str, str]], str]:
    """:func:`_scored`, or what it gave an earlier run (``keyed``: its memo, and what scoring
    reads of each unit, :func:`_scored_parts`) from the same inputs; with the key it is kept
    by (empty without a memo)."""
    if keyed is None:
        return _scored(q, ask, here, away, similarity), ""
    memo, parts = keyed
    key = memo.key(
        "qa",
        parts((q,)),
        ask,
        parts(here),
        parts(away),
        window_s,
    )
    kept = memo.get(key)
    if kept is not None:
        return _pairs(kept), key
    out = _scored(q, ask, here, away, similarity)
    memo.put(key, out, units=[q.unit_id, *(m.unit_id for m in (*here, *away))])
    return out, key


def _pairs(kept: Any) -> list[tuple[float, float, str, str]]:
    return [(float(a), float(b), str(c), str(d)) for a, b, c, d in kept]


class _Reach:
    """Which questions a change reaches: those of a unit not as it was, and those with a
    ``fresh`` unit (new, or weighed anew), or an edited unit where it stood last time
    (:attr:`LastRun.gone`), in their channel or at their place from their time to the end of
    the window, or replying to them. The others' scored answers are taken from ``memo`` by
    the key ``last`` kept."""

    def __init__(
        self, last: LastRun, memo: Memo, units: Sequence[Message], fresh: set[str]
    ) -> None:
        self._last = last
        self._memo = memo
        self.keys = last.keys  # each unit's key last run, read by the questions
        self._fresh = fresh
        self._channels: dict[str, list[float]] = {}
        self._places: dict[str, list[float]] = {}
        self._replied: set[str] = set()
        new = (m for m in units if m.unit_id in fresh or m.unit_id not in last.keys)
        for m in (*new, *last.gone):  # and where each edited unit stood last time
            self._channels.setdefault(m.channel, []).append(m.timestamp)
            self._places.setdefault(place_of(m), []).append(m.timestamp)
            if m.reply_to:
                self._replied.add(m.reply_to)
        for times in (*self._channels.values(), *self._places.values()):
            times.sort()

    def taken(
        self, q: Message, window_s: float
    ) -> tuple[str, list[tuple[float, float, str, str]]] | None:
        """The key ``q``'s scored answers were kept by, and them, when no change reaches
        them (counted in :attr:`LastRun.kept`); None otherwise."""
        key = self.keys.get(q.unit_id)
        if not key or key == UNKEYED or q.unit_id in self._fresh or q.unit_id in self._replied:
            return None
        for times in (self._channels.get(q.channel), self._places.get(place_of(q))):
            if times:
                k = bisect_left(times, q.timestamp)
                if k < len(times) and times[k] - q.timestamp <= window_s:
                    return None
        got = self._memo.get(key)
        if got is None:
            return None
        self._last.kept += 1
        return key, _pairs(got)


def _scored_parts(memo: Memo, by_id: Mapping[str, Message], similarity: Similarity) -> UnitParts:
    """What scoring a question's candidates reads of each unit, one digest a unit: the
    message and what its TF-IDF vector is weighed by
    (:meth:`~corpus_index.linked.similarity.Similarity.block_digest`)."""

    def read(unit: str) -> tuple[Any, ...]:
        return (memo.fingerprint(by_id[unit]), similarity.block_digest(unit))

    return UnitParts(read)


def find_answers(
    messages: Sequence[Message],
    *,
    similarity: Similarity,
    window_s: float = ANSWER_WINDOW_S,
    verifier: AnswerVerifier | None = None,
    memo: Memo | None = None,
    parts: UnitParts | None = None,
    kept: LastRun | None = None,
) -> list[QaLink]:
    """Every question of ``messages`` (one collection) with its answer or None, in the order
    the questions were asked.

    Args:
        window_s: how long after a question its answer is looked for (an explicit reply is
            taken at any distance).
        verifier: may refuse a pair before it is taken (the next best is then taken); its
            verdicts are kept in ``memo`` by its identity and the pair, so an unchanged pair
            is not asked again by the same verifier, and another verifier asks anew.
        memo: an earlier run's results: a question whose candidates and what their TF-IDF
            vectors are weighed by are unchanged keeps its scored answers (the pairs are then
            chosen again, over all questions, as without it).
        parts: with ``memo``, what its keys read of each unit when the caller has made it
            (the message and what its TF-IDF vector is weighed by, and anything more: one
            digest a unit serving every key of a run); made here otherwise.
        kept: with ``memo``, what the last run scored: the questions no change reaches keep
            their scored answers without their candidates being read (see the module's
            docstring); this run's keys, blocks and weighing are noted in it for the next.
    """
    ordered = in_time_order(messages)
    channels: dict[str, list[Message]] = {}
    for m in ordered:
        channels.setdefault(m.channel, []).append(m)
    asked: dict[str, Message] = {}
    scored: list[tuple[float, float, str, str]] = []
    replies: dict[str, list[Message]] = {}
    places: dict[str, list[Message]] = {}
    for m in ordered:
        if m.location.strip() and m.source in CONVERSATIONAL and not m.system:
            places.setdefault(place_of(m), []).append(m)
        if m.reply_to:
            replies.setdefault(m.reply_to, []).append(m)
    shared = {p for p, ms in places.items() if len({m.channel for m in ms}) > 1}
    by_id = {m.unit_id: m for m in ordered}
    keyed = None if memo is None else (memo, parts or _scored_parts(memo, by_id, similarity))
    reach = None
    if kept is not None:
        moved = kept.weigh(similarity)
        if memo is not None and kept.keys and kept.window_s == window_s:
            reach = _Reach(kept, memo, ordered, moved)
    before = {} if reach is None else reach.keys
    made = {} if kept is None else kept.made_keys  # this run's keys, for the next
    for channel in channels.values():
        for i, q in enumerate(channel):
            if before.get(q.unit_id) == NOT_ASKED:  # as it was: asked nothing then, nor now
                made[q.unit_id] = NOT_ASKED
                continue
            # a question kept by its key is as it was: it asks what it asked, read when needed
            taken = None if reach is None else reach.taken(q, window_s)
            if taken is not None:
                asked[q.unit_id] = q
                made[q.unit_id], pairs = taken
                scored.extend(pairs)
                continue
            ask = question_of(q.text) if q.source in CONVERSATIONAL and not q.system else None
            if ask is None:
                made[q.unit_id] = NOT_ASKED
                continue
            asked[q.unit_id] = q
            here = _in_channel(q, channel, i + 1, replies.get(q.unit_id, []), window_s)
            place = place_of(q)
            # a place with one channel has no other channel to look in
            away = _elsewhere(q, places[place], window_s) if place in shared else []
            pairs, key = _remembered(q, ask, here, away, similarity, window_s, keyed)
            made[q.unit_id] = key or UNKEYED
            scored.extend(pairs)
    scored.sort()
    answer_of: dict[str, tuple[str, float]] = {}
    used: set[str] = set()
    for neg, _, qid, mid in scored:
        if qid in answer_of or mid in used:
            continue
        if verifier is not None and _refused(verifier, memo, by_id[qid], by_id[mid]):
            continue
        answer_of[qid] = (mid, -neg)
        used.add(mid)
    out = []
    for qid, q in sorted(asked.items(), key=lambda kv: (kv[1].timestamp, kv[0])):
        mid, score = answer_of.get(qid, ("", 0.0))
        out.append(QaLink(qid, mid or None, round(score, 4), q.text))
    return out


def _refused(verifier: AnswerVerifier, memo: Memo | None, q: Message, m: Message) -> bool:
    """Whether ``verifier`` refuses ``m`` as the answer to ``q``: what it said of the pair
    before (``memo``: an earlier run's verdicts, kept by the verifier's identity and both
    messages, so a change of either, or another verifier, asks again), else asked now. A
    verdict is kept, no opinion (a reply it could not read, a server down) is not: asked
    again next run."""
    if memo is None:
        return verifier.verify(q, m) is False
    key = memo.key("verdict", verifier.identity, memo.fingerprint(q), memo.fingerprint(m))
    kept = memo.get(key)
    if kept is not None:
        return kept is False
    said = verifier.verify(q, m)
    if said is not None:
        memo.put(key, said, units=[q.unit_id, m.unit_id])
    return said is False


def qa_groups(
    links: Sequence[QaLink], by_id: dict[str, Message], *, now: float, carry: Carry | None = None
) -> list[Group | Carried]:
    """One ``qa_pair`` group per question: the question (initiator, primary) and its answer
    (resolution), resolved; or the question alone, open and re-processed at priority 8, until
    a week has passed since it was asked (then ``timeout``, priority 0). ``carry``: asked of
    each group before it is made (what it gives is taken instead)."""
    out: list[Group | Carried] = []
    for link in links:
        q = by_id[link.question]
        ids = [q.unit_id]
        times = [q.timestamp]
        relevance = None
        if link.answer is not None:
            relevance = min(link.score, 1.0)
            ids.append(link.answer)
            times.append(by_id[link.answer].timestamp)
            state = ("complete", "resolved", 0)
        elif now - q.timestamp >= TIMEOUT_S:
            state = ("partial", "timeout", 0)
        else:
            state = ("evolving", "open", PRIORITY_OPEN)
        if carry is not None:
            kept = carry("qa_pair", ids, max(times), question_mark(state[1], relevance))
            if kept is not None:
                out.append(kept)
                continue
        members = [Member(q.unit_id, 1, "initiator", primary=True)]
        if link.answer is not None and relevance is not None:
            members.append(Member(link.answer, 2, "resolution", relevance=relevance))
        out.append(
            Group(
                group_type="qa_pair",
                processing_profile=q.source or "chat",
                members=tuple(members),
                completeness=state[0],
                resolution_status=state[1],
                reprocess_priority=state[2],
                resolved_by_unit_id=link.answer,
                # as describing the group dates it (from its members' times)
                earliest_content_at=min(times),
                latest_content_at=max(times),
            )
        )
    return out
