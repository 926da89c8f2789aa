"""Linked groups of one collection's units (seed "Linked Context V2" §2.1, §5):
:func:`link_units` makes every conversation, question with its answer, incident with its shift
notes, day at a place, decision thread (:mod:`.decisions`) and topic cluster (:mod:`.topics`),
each described (title, summary, anchors, tags, coherence) and given
its completeness, resolution status and re-processing priority.

The records (:class:`Group`, :class:`Member`, :func:`group_id`) are in :mod:`.records` and
are re-exported here.

Tenancy and access are not decided here: the ``linked_groups`` step gives a group its members'
tenant and the intersection of their ACL groups.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from corpus_index.linked.conversations import group_conversations
from corpus_index.linked.days import daily_contexts
from corpus_index.linked.decisions import decision_summary, decision_threads, titled
from corpus_index.linked.describe import describe
from corpus_index.linked.incidents import NOTE_WINDOW_S, incident_contexts, involved
from corpus_index.linked.lastrun import LastRun
from corpus_index.linked.memo import Memo, UnitParts
from corpus_index.linked.messages import InTimeOrder, Message, in_time_order, time_key
from corpus_index.linked.people import NameResolver, People
from corpus_index.linked.questions import ANSWER_WINDOW_S, AnswerVerifier, find_answers, qa_groups
from corpus_index.linked.records import (
    COMPLETENESS,
    GROUP_TYPES,
    MEMBER_ROLES,
    RESOLUTION,
    Carried,
    Carry,
    Group,
    Member,
    group_id,
)
from corpus_index.linked.relink import Relinker
from corpus_index.linked.settled import Settled, dated
from corpus_index.linked.similarity import Similarity
from corpus_index.linked.topics import topic_clusters, topic_title

__all__ = [
    "COMPLETENESS",
    "GROUP_TYPES",
    "MEMBER_ROLES",
    "RESOLUTION",
    "Group",
    "Member",
    "Windows",
    "conversation_groups",
    "group_id",
    "link_units",
]

# records written whole, not turns of an exchange: never linked into conversations (their
# groups are the incident contexts and the days at a place)
NOT_CONVERSATIONAL = frozenset({"incident_report", "shift_note", "resource_doc"})
ACTIVE_S = 7 * 24 * 3600.0  # a conversation with a message this recent is active (weekly refresh)
VALIDATION_S = 48 * 3600.0  # content younger than this still has its validation pass to come
PRIORITY_VALIDATION = 3
PRIORITY_ACTIVE = 1


@dataclass(frozen=True, slots=True)
class Windows:
    """How far the groupings look: after a question for its answer, either side of an incident
    for its shift notes. Re-processing widens them (seed §2.4)."""

    answer_s: float = ANSWER_WINDOW_S
    notes_s: float = NOTE_WINDOW_S

    def widened(self, factor: float) -> Windows:
        """Both windows ``factor`` times as wide."""
        return Windows(self.answer_s * factor, self.notes_s * factor)


def conversation_groups(
    messages: Sequence[Message], *, relinker: Relinker | None = None, carry: Carry | None = None
) -> list[Group | Carried]:
    """Every conversation of two or more messages (of chat, SMS, e-mail and calls, not of
    incident reports, shift notes or resources), members in time order (the first the
    initiator), with its people, place and time span; linked by ``relinker`` when given
    (from an earlier run's links: the same conversations, less work). ``carry``: asked of
    each conversation before it is made (what it gives is taken instead); none: all made."""
    by_id = {m.unit_id: m for m in messages}
    chat = [m for m in messages if not m.system and m.source not in NOT_CONVERSATIONAL]
    if isinstance(messages, InTimeOrder):  # taken in order: in order
        chat = InTimeOrder(chat)
    out: list[Group | Carried] = []
    for ids in relinker.group(chat) if relinker else group_conversations(chat):
        if len(ids) < 2:
            continue
        # a channel of messages in order is read in that order, and so are its conversations
        units = [by_id[i] for i in ids]
        if not isinstance(chat, InTimeOrder):
            units.sort(key=time_key)
        if carry is not None:
            kept = carry("conversation", [m.unit_id for m in units], units[-1].timestamp, "")
            if kept is not None:
                out.append(kept)
                continue
        members = tuple(
            Member(m.unit_id, k + 1, "initiator" if k == 0 else "response")
            for k, m in enumerate(units)
        )
        out.append(
            Group(
                group_type="conversation",
                processing_profile=units[0].source or "chat",
                members=members,
                identity_anchors=tuple(dict.fromkeys(m.author for m in units if m.author)),
                location_anchors=tuple(dict.fromkeys(m.location for m in units if m.location)),
                earliest_content_at=units[0].timestamp,
                latest_content_at=units[-1].timestamp,
                # as a conversation over a week old is judged (:func:`_timed`), the most
                resolution_status="resolved",
            )
        )
    return out


def _units(messages: Sequence[Message]) -> list[Message]:
    """One message per unit id in time order, so that grouping does not depend on the order of
    the units; a unit cut into several blocks has their texts joined in the order given."""
    merged: dict[str, Message] = {}
    for m in in_time_order(messages):
        seen = merged.get(m.unit_id)
        merged[m.unit_id] = m if seen is None else replace(seen, text=f"{seen.text}\n{m.text}")
    # each unit where its first block stands, with that block's time and id: in order
    return InTimeOrder(merged.values())


def _timing(group: Group, now: float, latest: float | None = None) -> tuple[bool, bool]:
    """Whether ``group`` is active (a conversation with a message under a week old) and has
    its validation pass to come (its newest unit under 48 hours old) at ``now``: all
    :func:`_timed` reads of ``now`` (``latest``: its newest unit's time, its own by
    default)."""
    latest = (group.latest_content_at or 0.0) if latest is None else latest
    return _timing_of(group.group_type, now, latest)


def _timing_of(group_type: str, now: float, latest: float) -> tuple[bool, bool]:
    """:func:`_timing` of a group of ``group_type`` whose newest unit is of ``latest``."""
    active = group_type == "conversation" and now - latest < ACTIVE_S
    return active, now - latest < VALIDATION_S


def _timed(group: Group, now: float) -> Group:
    """A conversation still going is evolving (weekly refresh); any group whose newest unit is
    under 48 hours old still has its validation pass to come (seed §7.1)."""
    active, validating = _timing(group, now)
    was = (group.completeness, group.resolution_status, group.reprocess_priority)
    completeness, resolution, priority = was
    if group.group_type == "conversation":
        completeness = "evolving" if active else "complete"
        resolution = "open" if active else "resolved"
        priority = PRIORITY_ACTIVE if active else 0
    if validating:
        priority = max(priority, PRIORITY_VALIDATION)
    if (completeness, resolution, priority) == was:
        return group  # as its grouping made it (most groups, most runs)
    return replace(
        group,
        completeness=completeness,
        resolution_status=resolution,
        reprocess_priority=priority,
    )


def link_units(
    messages: Sequence[Message],
    *,
    registry: NameResolver | None = None,
    now: float | None = None,
    windows: Windows = Windows(),
    verifier: AnswerVerifier | None = None,
    relinker: Relinker | None = None,
    memo: Memo | None = None,
    settled: Settled | None = None,
    last: LastRun | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> list[Group]:
    """All the groups of one collection's units (the ``linked_groups`` step calls this):
    conversations, questions with their answers, incidents with their shift notes, days at a
    place, decision threads and topic clusters, described and prioritised. Deterministic: the same units (in any order), the
    same registry and the same ``now`` make the same groups in the same order.

    Args:
        messages: the units of one collection (so of one tenant: a group never spans two).
        registry: the tenant's identity registry (an
            :class:`~corpus_index.identities.IdentityRegistry`); anchors are then identity
            ids, else names as written.
        now: the time (seconds since the epoch) priorities and timeouts are judged at; the
            newest unit's time by default.
        windows: how far answers and shift notes are looked for.
        verifier: may refuse a question-answer pair (none by default: no network); with
            ``memo``, its verdicts are kept by its identity and the pair (see
            :func:`~corpus_index.linked.questions.find_answers`).
        relinker: links the conversations from an earlier run's links, re-deciding only the
            channels' changed ends (see :mod:`corpus_index.linked.relink`); the groups are
            the same as without it.
        memo: an earlier run's results (see :mod:`corpus_index.linked.memo`): questions
            whose candidates, and groups whose members and identity anchors, are unchanged
            keep their scored answers and descriptions; the groups are the same as without it.
        settled: with ``memo``, carries the groups whose every input is as it was (see
            :mod:`corpus_index.linked.settled`): each is returned as its grouping made it,
            dated and timed, not described (its row is the last run's); the others are
            described, and their keys wait for their rows. A conversation, question or day
            as it was (at the same timing) is not made at all: it is in ``settled.tokens``,
            by its id, with its priority and anchor, not in what is returned.
        last: with ``memo``, what the last run left of each unit
            (:mod:`corpus_index.linked.lastrun`): questions no change reaches keep their
            scored answers without their candidates being read (see
            :mod:`corpus_index.linked.questions`), and a unit weighed as it was keeps its
            digest in the settled keys; this run's are noted in it.
        progress: told each grouping's name and how many groups it made, as each is done
            (``conversations``, ``questions``, ``incidents``, ``days``, ``decisions``,
            ``topics``), for a long run's log.
    """
    units = _units(messages)
    if not units:
        return []
    now = units[-1].timestamp if now is None else now
    by_id = {m.unit_id: m for m in units}
    similarity = Similarity(units)
    people = People(registry)
    out: list[Group] = []
    keyed = None if memo is None else (memo, _member_parts(memo, by_id, similarity, people))
    if keyed is None:
        settled = None
    if last is not None:
        last.weigh(similarity)
    if settled is not None:
        settled.start(by_id, similarity, known=None if last is None else last.settled_parts())

    def described(
        g: Group, primary: str | None = None, hint: str | None = None, post: str = ""
    ) -> Group:
        if settled is not None:
            latest = max(by_id[u].timestamp for u in g.member_ids)
            if settled.carry(g, primary, hint, post, _timing(g, now, latest)):
                return dated(g, by_id)
        made, key = _described(g, by_id, similarity, people, keyed, primary, hint)
        if settled is not None:
            settled.described(settled.gid(g), key)
        if post == "decision":
            return decision_summary(made, by_id)
        return topic_title(made) if post == "topic" else made

    def done(what: str, n: int) -> None:
        if progress is not None:
            progress(what, n)

    def carried(group_type: str, ids: Sequence[str], latest: float, mark: str) -> Carried | None:
        assert settled is not None
        return settled.token(group_type, ids, mark, _timing_of(group_type, now, latest))

    # a conversation, question or day as it was is carried whole before it is made
    carry = None if settled is None else carried
    conversations = conversation_groups(units, relinker=relinker, carry=carry)
    for g in conversations:
        if isinstance(g, Group):
            out.append(described(g))
    done("conversations", len(conversations))
    links = find_answers(
        units,
        similarity=similarity,
        window_s=windows.answer_s,
        verifier=verifier,
        memo=memo,
        # what scoring reads of each unit (no identity anchors): the settled groups' parts
        # when settling (one digest a unit for both), else its own
        parts=None if settled is None else settled.parts,
        kept=last,
    )
    for g, link in zip(qa_groups(links, by_id, now=now, carry=carry), links, strict=True):
        if isinstance(g, Group):
            out.append(described(g, by_id[link.question].author, link.sentence))
    done("questions", len(links))
    incidents = incident_contexts(
        units, similarity=similarity, people=people, window_s=windows.notes_s, now=now
    )
    for g in incidents:
        subjects = involved(by_id[g.members[0].unit_id]).subjects
        primary = subjects[0] if subjects else None
        out.append(described(g, primary))
    done("incidents", len(incidents))
    days = daily_contexts(units, carry=carry)
    for g in days:
        if isinstance(g, Group):
            out.append(described(g))
    done("days", len(days))
    threads = [g.member_ids for g in conversations]
    answered = {link.question: link.answer for link in links if link.answer}
    found = decision_threads(
        units, conversations=threads, answers=answered, similarity=similarity, last=last
    )
    for t in found:
        out.append(described(t.group, t.decider, titled(t), "decision"))
    done("decisions", len(found))
    topics = topic_clusters(
        units,
        conversations=threads,
        similarity=similarity,
        memo=memo,
        parts=None if settled is None else settled.parts,
    )
    for g in topics:
        out.append(described(g, post="topic"))
    done("topics", len(topics))
    if last is not None and settled is not None and settled.parts is not None:
        last.made_parts = settled.parts.made
    return [_timed(g, now) for g in out]


# the columns :func:`describe` fills, as a memo keeps them
_DESCRIBED = (
    "title",
    "summary",
    "identity_anchors",
    "primary_identity",
    "location_anchors",
    "event_date",
    "event_date_end",
    "earliest_content_at",
    "latest_content_at",
    "domain_tags",
    "topic_tags",
    "coherence",
)


def _member_parts(
    memo: Memo, by_id: Mapping[str, Message], similarity: Similarity, people: People
) -> UnitParts:
    """What describing a group reads of each member, one digest a unit: the message, what its
    TF-IDF vector is weighed by
    (:meth:`~corpus_index.linked.similarity.Similarity.block_digest`) and its identity
    anchors. (A question's scored answers are keyed by the first two only: a settled group is
    not described, so its members' anchors are not resolved to score a question.)"""

    def read(unit: str) -> tuple[Any, ...]:
        m = by_id[unit]
        return (memo.fingerprint(m), similarity.block_digest(unit), *people.anchors(m))

    return UnitParts(read)


def _described(
    group: Group,
    by_id: Mapping[str, Message],
    similarity: Similarity,
    people: People,
    keyed: tuple[Memo, UnitParts] | None,
    primary: str | None,
    hint: str | None,
) -> tuple[Group, str]:
    """:func:`describe`, or what it gave an earlier run (``keyed``: its memo, and what a
    description reads of each member, :func:`_member_parts`) from the same inputs: the group,
    what it reads of its members and the person the group is about; with the key it was kept
    by (empty without a memo)."""

    def described() -> Group:
        return describe(
            group,
            by_id,
            similarity=similarity,
            people=people,
            primary_person=primary,
            title_hint=hint,
        )

    if keyed is None:
        return described(), ""
    memo, parts = keyed
    key = memo.key(
        "describe",
        group,
        parts(group.members),
        people.person(primary) if primary else None,
        hint,
    )
    kept = memo.get(key)
    if kept is not None:
        values: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in kept.items()
        }
        return replace(group, **values), key
    out = described()
    values = {k: getattr(out, k) for k in _DESCRIBED}
    memo.put(
        key,
        {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()},
        units=group.member_ids,
    )
    return out, key
