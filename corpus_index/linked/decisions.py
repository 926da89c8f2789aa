"""Decision threads: a proposal, the discussion of it and the unit that decides it (seed
"Linked Context V2" §2.1, ``decision_thread``).

A unit decides when it is not asking and one of these holds:

- a sentence states a decision: "we'll go with", "going with", "decided", "the decision is",
  "agreed", "approved", "let's do / go with / book", "go ahead", "settled on", "signed off",
  "final call", unless a negation or a condition comes just before it ("not approved yet",
  "once it's approved", "haven't decided") or it qualifies a noun ("an agreed time");
- it confirms ("yes", "of course", "sure", "go ahead", "sounds good", after any greeting) the
  later answer to a request for permission or a choice asked by someone else ("is Peter allowed
  to go", "would it be OK for John to come home", "can we book", "should we", "chicken or pork?").

The thread a decision closes is read from the structure it sits in, in this order: the
conversation that holds it; else its e-mail or SMS thread (units of the same thread, at most
``THREAD_WINDOW_S`` before it); else, for a confirmation, the question it answers. The thread
opens at the unit the decision answers or replies to, else at the first earlier unit there that
proposes (asks, or says "propose", "suggest", "options", "how about", "quote" ...) on the
decision's topic (a conversation as the linker draws it may hold another matter first), and
ends at the decision: proposal (initiator),
discussion (responses) and the decision (role ``decision``, primary). Someone other than the
decider must take part before it. A conversation holding several decisions gives one thread,
closed by the last of them; a decision no proposal precedes is not a thread.

A conversation with an explicit proposal ("I propose", "should we", "the options are",
"vote") that at least two others have discussed, and no decision yet, is an open thread.

The group records the decision unit (``resolved_by_unit_id``), who decided (the builder
passes the decider as the group's primary person) and when (the thread ends at the decision:
its ``latest_content_at``); ``resolution_status`` is ``resolved``, or ``open`` for a thread
still undecided.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import compress, repeat
from operator import is_
from typing import NamedTuple, TypeVar, cast

from corpus_index.linked.describe import SUMMARY_CHARS, display, nice_date
from corpus_index.linked.lastrun import LastRun
from corpus_index.linked.messages import Message, day_of, time_key
from corpus_index.linked.questions import question_of
from corpus_index.linked.records import Group, Member
from corpus_index.linked.similarity import Similarity

THREAD_WINDOW_S = 14 * 24 * 3600.0  # an e-mail or SMS thread is read this far before a decision
THREADED = frozenset({"email_thread", "sms_message"})  # sources whose channel is the thread
MIN_TOPIC = 0.05  # a proposal the decision shares no rare word with is another matter
MIN_OPEN_RESPONSES = 2  # others who discussed an open proposal (fewer: not yet a discussion)


def _words(*phrases: str) -> re.Pattern[str]:
    """One case-blind pattern matching any of ``phrases`` (regular expressions) as words."""
    return re.compile(r"\b(?:" + "|".join(phrases) + r")\b", re.IGNORECASE)


T = TypeVar("T")
_FINE = r"(?:ok|okay|alright|all\s+right|fine)"
_DECIDES = _words(
    r"(?:we|i)(?:'ll|\s+will)\s+go\s+with",
    r"(?:let'?s|we're|we\s+are|i'm|i\s+am)\s+going\s+with",
    r"let'?s\s+(?:do|go\s+with|book|stick\s+with|go\s+ahead)",
    r"going\s+with",
    "decided",
    r"decision\s*(?:is|was|made)",
    "agreed",
    "approved",
    r"go\s+ahead",
    r"settled\s+on",
    r"signed\s+off",
    r"final\s+(?:call|decision)",
)
# a negation or condition at most two words before a decision word, with no punctuation
# between, undoes it ("not yet approved", "once it's approved"; not "No worries, we'll go with")
_UNDONE = re.compile(
    r"(?:\b(?:not|never|no|yet|if|once|until|unless|whether|pending|before|when)\b|n't\b)"
    r"(?:\s+[\w']+){0,2}\s*$",
    re.IGNORECASE,
)
_ADJECTIVE = re.compile(r"\b(?:an|a|the)\s*$", re.IGNORECASE)  # "an agreed time"
_PROPOSES = _words(
    r"propos\w*",
    r"suggest\w*",
    "options?",
    "thinking",
    r"(?:how|what)\s+about",
    r"(?:should|shall)\s+we",
    "quotes?",
    "vote",
    "prefer",
    rf"would\s+it\s+be\s+{_FINE}",
)
# a proposal explicit enough to be an open decision while nobody has decided it
_OPEN_PROPOSAL = _words(
    r"(?:i|we)\s+(?:propose|suggest)",
    "proposal",
    r"(?:should|shall)\s+we",
    r"options\s+are",
    r"vote\s+on",
    r"put\s+it\s+to\s+a\s+vote",
    r"which\s+(?:one|option)",
)
# a request for permission or a choice, which a "yes" decides
_REQUESTS = _words(
    r"(?:is|are)\s+(?:\w+\s+){0,2}allowed",
    rf"(?:would|will)\s+it\s+be\s+{_FINE}",
    rf"is\s+(?:it|that)\s+{_FINE}",
    rf"if\s+that's\s+{_FINE}",
    r"(?:can|could|may)\s+(?:i|we)",
    r"(?:should|shall)\s+we",
    r"ok(?:ay)?\s+to",
    r"happy\s+for",
    r"approv\w*",
    r"sign\s+off",
    "permission",
    r"\w+\s+or\s+\w+(?=\s*\?)",  # a choice: "chicken or pork?"
)
_CONFIRMS = re.compile(
    r"^"
    + _words(
        "yes",
        "yep",
        "yeah",
        r"of\s+course",
        "sure",
        "certainly",
        "absolutely",
        "approved",
        r"go\s+ahead",
        r"sounds\s+good",
        r"fine\s+by\s+me",
        r"that's\s+fine",
        r"ok(?:ay)?[\s,-]+(?:go\s+ahead|do\s+it|book\s+it)",
    ).pattern,
    re.IGNORECASE,
)
# greetings, with the name greeted ("Hi Bob,", "Dear Sarah,")
_HELLO = r"(?:hi|hey|hello|dear|morning|good\s+morning|g'day)\b[^,\n.!]{0,30}[,.!]?\s*"
_GREETING = re.compile(rf"^(?:{_HELLO})+", re.IGNORECASE)
_SAYS_SO = re.compile(r"(?:decided|agreed|approved|decision)\b", re.IGNORECASE)
_IF_ALL_RIGHT = _words(rf"if\s+that's\s+{_FINE}")
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")


def decision_sentence(text: str) -> str | None:
    """The first sentence of ``text`` that states a decision (not asked, not negated or
    conditional, not "an agreed time"), or None."""
    for raw in _SENTENCE.findall(text):
        sentence = str(raw).strip()
        if not sentence or sentence.endswith("?"):
            continue
        for found in _DECIDES.finditer(sentence):
            before = sentence[: found.start()]
            if _UNDONE.search(before) or _ADJECTIVE.search(before):
                continue
            return sentence
    return None


def confirms(text: str) -> str | None:
    """The opening sentence of ``text`` when it confirms ("yes", "of course", "go ahead"...,
    after any greeting), or None."""
    body = _GREETING.sub("", text.strip(), count=1)
    if not _CONFIRMS.match(body):
        return None
    first = _SENTENCE.findall(body)
    return str(first[0]).strip() if first else body


def proposes(text: str) -> bool:
    """Whether ``text`` puts something to decide: it asks, or proposes in so many words."""
    return question_of(text) is not None or bool(_PROPOSES.search(text))


def requests(text: str) -> bool:
    """Whether a sentence of ``text`` asks for permission or for a choice (which a "yes" then
    decides): a question that does, or a wish "if that's all right"."""
    for raw in _SENTENCE.findall(text):
        sentence = raw.strip()
        found = _REQUESTS.search(sentence)
        if found and (question_of(sentence) is not None or _IF_ALL_RIGHT.search(sentence)):
            return True
    return False


class DecisionThread(NamedTuple):
    """A decision thread found: the group, who decided (as written; None while open) and the
    sentence that says what was decided (or proposed, while open)."""

    group: Group
    decider: str | None
    sentence: str


def _by_time(units: Iterable[Message]) -> list[Message]:
    return sorted(units, key=time_key)


def _thread(
    container: Sequence[Message],
    decision: Message,
    sentence: str,
    *,
    anchor: str | None,
    similarity: Similarity | None,
) -> DecisionThread | None:
    """The thread of ``container`` (time order) closed by ``decision``: from the unit it
    answers or replies to (``anchor``), else from the first earlier proposal on its topic
    (at least ``MIN_TOPIC`` alike by ``similarity``, when given), to the decision; None when
    nothing proposes first or nobody but the decider takes part."""
    end = container.index(decision)
    ids = [m.unit_id for m in container[:end]]
    if anchor in ids:
        start: int | None = ids.index(anchor)
    else:
        start = next(
            (
                k
                for k in range(end)
                if proposes(container[k].text)
                and (similarity is None or similarity.pair(ids[k], decision.unit_id) >= MIN_TOPIC)
            ),
            None,
        )
    if start is None:
        return None
    units = container[start : end + 1]
    if all(m.author == decision.author for m in units[:-1]):
        return None
    members = [
        Member(m.unit_id, k + 1, "initiator" if k == 0 else "response")
        for k, m in enumerate(units[:-1])
    ]
    members.append(Member(decision.unit_id, len(units), "decision", primary=True))
    group = Group(
        group_type="decision_thread",
        processing_profile=decision.source or "chat",
        members=tuple(members),
        completeness="complete",
        resolution_status="resolved",
        resolved_by_unit_id=decision.unit_id,
    )
    return DecisionThread(group, decision.author, sentence)


def _open(
    container: Sequence[Message], proposal: Callable[[Message], bool]
) -> DecisionThread | None:
    """An open thread of ``container``: its first explicit proposal (``proposal``) and what
    follows, when at least ``MIN_OPEN_RESPONSES`` others have discussed it."""
    start = next((k for k, m in enumerate(container) if proposal(m)), None)
    if start is None:
        return None
    units = container[start:]
    proposer = units[0].author
    if len({m.author for m in units[1:] if m.author != proposer}) < MIN_OPEN_RESPONSES:
        return None
    members = tuple(
        Member(m.unit_id, k + 1, "initiator" if k == 0 else "response", primary=k == 0)
        for k, m in enumerate(units)
    )
    group = Group(
        group_type="decision_thread",
        processing_profile=units[0].source or "chat",
        members=members,
        completeness="evolving",
        resolution_status="open",
    )
    asked = question_of(units[0].text)
    return DecisionThread(group, None, asked.sentence if asked else units[0].text)


def decision_threads(
    units: Sequence[Message],
    *,
    conversations: Sequence[Sequence[str]],
    answers: Mapping[str, str],
    similarity: Similarity | None = None,
    last: LastRun | None = None,
) -> list[DecisionThread]:
    """Every decision thread of one collection's ``units`` (any order).

    Args:
        conversations: the member ids of each conversation (the structure a decision in chat
            sits in).
        answers: question unit id -> the unit answering it (the question-answer links).
        similarity: TF-IDF over the collection, to open a thread at a proposal on the
            decision's topic (without it, at the first proposal).
        last: what the last run read of each unit's text (the sentence it decides by,
            whether it proposes), taken for the units that are as they were; this run's are
            noted in it (see :mod:`corpus_index.linked.lastrun`).
    """
    said = _Said(last)
    by_id = {m.unit_id: m for m in units}
    question_of_answer = {a: q for q, a in answers.items() if a in by_id and q in by_id}
    sentences = said.sentences(units)
    # a unit decides by its own sentence, or by confirming the answer to a question: no other
    # unit can close a thread, so only these are read (the latest first, as the last decision
    # of a container closes its thread)
    deciding = _by_time(m for m in units if sentences[m.unit_id] or m.unit_id in question_of_answer)
    in_conversation: dict[str, int] = {}
    if deciding:
        in_conversation = {i: k for k, ids in enumerate(conversations) for i in ids if i in by_id}
    threads: dict[str, list[Message]] | None = None
    found: dict[tuple[str, ...], DecisionThread] = {}
    decided_conversations: set[int] = set()
    for m in reversed(deciding):
        question = by_id.get(question_of_answer.get(m.unit_id, ""))
        sentence = sentences[m.unit_id] or None
        if sentence is None and question is not None and question.author != m.author:
            # a confirmation of the answer to a request (the answer read first: few confirm)
            confirmed = confirms(m.text)
            sentence = confirmed if confirmed is not None and requests(question.text) else None
        if sentence is None:
            continue
        k = in_conversation.get(m.unit_id)
        if k is not None:
            if k in decided_conversations:
                continue
            container = _by_time(by_id[i] for i in conversations[k] if i in by_id)
        elif m.source in THREADED and m.channel:
            if threads is None:
                threads = _threads(units)
            whole = threads[f"{m.source}\x00{m.channel}"]
            container = [u for u in whole if 0 <= m.timestamp - u.timestamp <= THREAD_WINDOW_S]
            container = container[: container.index(m) + 1]
        elif question is not None:
            container = _by_time([question, m])
        else:
            continue
        anchor = question.unit_id if question is not None else m.reply_to
        thread = _thread(container, m, sentence, anchor=anchor, similarity=similarity)
        if thread is None:
            continue
        if k is not None:
            decided_conversations.add(k)
        found.setdefault(thread.group.member_ids, thread)
    proposing = said.proposers(units)
    for k, ids in enumerate(conversations):
        # most conversations propose nothing
        if k in decided_conversations or proposing.isdisjoint(ids):
            continue
        mine = _by_time(by_id[i] for i in ids if i in by_id)
        opened = _open(mine, lambda m: m.unit_id in proposing)
        if opened is not None:
            found.setdefault(opened.group.member_ids, opened)
    return sorted(
        found.values(),
        key=lambda t: (by_id[t.group.members[0].unit_id].timestamp, t.group.member_ids),
    )


class _Said:
    """:func:`decision_sentence` and the open proposal of each unit, taken from ``last`` for
    the units it holds (they are as they were) and noted in it for the next run."""

    def __init__(self, last: LastRun | None) -> None:
        self._last = last

    def sentences(self, units: Sequence[Message]) -> dict[str, str]:
        """Unit id -> the sentence it decides by ("": none), of every unit of ``units``."""
        return self._every(
            units,
            None if self._last is None else self._last.decides,
            lambda m: decision_sentence(m.text) or "",
            None if self._last is None else self._last.made_decides,
        )

    def proposers(self, units: Sequence[Message]) -> set[str]:
        """The ids of the units of ``units`` that put a proposal to decide."""
        said = self._every(
            units,
            None if self._last is None else self._last.proposes,
            lambda m: bool(_OPEN_PROPOSAL.search(m.text)),
            None if self._last is None else self._last.made_proposes,
        )
        return {u for u, proposes in said.items() if proposes}

    @staticmethod
    def _every(
        units: Sequence[Message],
        kept: Mapping[str, T] | None,
        read: Callable[[Message], T],
        made: dict[str, T] | None,
    ) -> dict[str, T]:
        """Unit id -> its value in ``kept``, else ``read`` of it; noted in ``made``."""
        if kept is None:
            out = {m.unit_id: read(m) for m in units}
        else:
            ids = [m.unit_id for m in units]
            values = list(map(kept.get, ids))
            found: dict[str, T | None] = dict(zip(ids, values, strict=True))
            for m in compress(units, map(is_, values, repeat(None))):  # not kept: read
                found[m.unit_id] = read(m)
            out = cast(dict[str, T], found)  # every None read
        if made is not None:
            made.update(out)
        return out


def _threads(units: Iterable[Message]) -> dict[str, list[Message]]:
    """The units of each e-mail or SMS thread (by source and channel), in time order."""
    threads: dict[str, list[Message]] = {}
    for m in _by_time(units):
        if m.source in THREADED and m.channel:
            threads.setdefault(f"{m.source}\x00{m.channel}", []).append(m)
    return threads


def titled(thread: DecisionThread) -> str:
    """The sentence a decision thread's title is taken from: what was decided, or, while
    open, what is proposed."""
    if _SAYS_SO.match(thread.sentence):  # "Decided: ...", "Agreed, ..." say it themselves
        return thread.sentence
    lead = "Decided" if thread.decider is not None else "Undecided"
    return f"{lead}: {thread.sentence}"


def decision_summary(group: Group, by_id: Mapping[str, Message]) -> Group:
    """``group`` (a described decision thread) whose summary opens with who decided what and
    when (or who proposed it, while open), then the people, place and dates."""
    if group.resolved_by_unit_id is not None:
        unit = by_id[group.resolved_by_unit_id]
        head = f"Decided by {display(unit.author)} on {nice_date(day_of(unit))}"
    else:
        unit = by_id[group.members[0].unit_id]
        head = f"Proposed by {display(unit.author)} on {nice_date(day_of(unit))}, undecided"
    said = " ".join(unit.text.split())
    if len(said) > SUMMARY_CHARS:
        said = said[: SUMMARY_CHARS - 1].rstrip() + "\u2026"
    rest = group.summary.split("\n", 1)[-1]
    return replace(group, summary=f"{head}: {said}\n{rest}")
