"""Incident contexts: an incident report with the shift notes of the staff who were there
and the other content about the people it involves (seed "Linked Context" §5.2, §2.4).

For each incident report, what was written at the same location within a day of it (either
side: late entries come the next morning) is a candidate. A shift note joins when it names
someone the report is about or was present, when its author was present, or when it reads like
the report (TF-IDF similarity); its relevance weighs the same evidence and the time between them.
Other content (chat, SMS, e-mail, calls) joins only when it names someone the report is about
(the participant, not only the staff, who are named everywhere), at a lower relevance.
The report is the primary member; the notes support it, then the other content, each in time
order.

Completeness follows who was there: every staff member present (the report's "Staff present:"
line, and its author) has written a note: complete; some have: partial, re-processed daily
(priority 5); none: partial and pending its context, re-processed every six hours (priority 10);
either for a week at most.
A note that arrives later is found when the incident is re-evaluated with a wider window.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from corpus_index.linked.messages import Message, in_time_order, place_of
from corpus_index.linked.people import People, names_in, same_name
from corpus_index.linked.records import Group, Member
from corpus_index.linked.similarity import Similarity

INCIDENT = "incident_report"
SHIFT_NOTE = "shift_note"
# what an incident context never gathers: reports (each is a context of its own) and
# resources (policies name everyone)
_NOT_GATHERED = frozenset({INCIDENT, "resource_doc"})
NOTE_WINDOW_S = 24 * 3600.0  # a first pass looks this far either side of the report
PRIORITY_NO_CONTEXT = 10
PRIORITY_PARTIAL = 5
GIVE_UP_S = 7 * 24 * 3600.0  # notes are looked for this long after the report (seed §5.2)
MIN_SIMILARITY = 0.15  # a note naming nobody in the report joins only if at least this alike

_STAFF = re.compile(r"\bstaff(?: present)?\s*:\s*([^\n]+)", re.IGNORECASE)
_INVOLVED = re.compile(r"\bpeople involved\s*:\s*([^\n]+)", re.IGNORECASE)
_PAREN = re.compile(r"\(([^)]*)\)")


@dataclass(frozen=True, slots=True)
class Involved:
    """Who an incident report names: the people it is about, and the staff who were there
    (its author among them), as written."""

    subjects: tuple[str, ...]
    staff: tuple[str, ...]


def _listed(line: str) -> list[tuple[str, str]]:
    """``(name, note)`` of each entry of a list line, up to its first full stop:
    ``"Mike Brennan, Jane Okafor (RN)."`` -> ``[("Mike Brennan", ""), ("Jane Okafor", "RN")]``."""
    head = re.split(r"\.(?:\s|$)", line, maxsplit=1)[0]
    out = []
    for part in re.split(r",|\band\b", head):
        note = " ".join(_PAREN.findall(part)).strip().lower()
        name = _PAREN.sub("", part).strip()
        if name:
            out.append((name, note))
    return out


def involved(report: Message) -> Involved:
    """The people ``report`` names on its "People involved:" and "Staff present:" lines (and
    its author, who was there)."""
    staff = [report.author]
    for m in _STAFF.finditer(report.text):
        staff.extend(name for name, _ in _listed(m.group(1)))
    subjects = []
    for m in _INVOLVED.finditer(report.text):
        for name, note in _listed(m.group(1).split("Staff", 1)[0]):
            if "staff" in note or any(same_name(name, s) for s in staff):
                continue
            subjects.append(name)
    return Involved(tuple(dict.fromkeys(subjects)), tuple(dict.fromkeys(staff)))


def _names_any(people: People, note: Message, names: Sequence[str]) -> bool:
    """Whether ``note``'s text names anyone of ``names`` (identities, or given names)."""
    if people.has_registry:
        wanted = {people.identity(n) for n in names} - {None}
        return bool(wanted & set(people.named(note)))
    written = set(names_in(note.text))
    return any(same_name(n, w) for n in names for w in written)


def _relevance(
    people: People, report: Message, note: Message, who: Involved, sim: float, window_s: float
) -> float | None:
    """How relevant ``note`` is to ``report`` (0 to 1), or None when it does not belong."""
    about = _names_any(people, note, who.subjects)
    by_staff = any(people.same(note.author, s) for s in who.staff)
    names_staff = _names_any(people, note, who.staff)
    if not (about or by_staff or names_staff or sim >= MIN_SIMILARITY):
        return None
    gap = abs(note.timestamp - report.timestamp) / max(window_s, 1.0)
    score = 0.3 + 0.25 * about + 0.2 * by_staff + 0.05 * names_staff + 0.4 * sim
    return round(min(1.0, score - 0.1 * min(gap, 1.0)), 4)


def _related(
    people: People, report: Message, other: Message, who: Involved, sim: float, window_s: float
) -> float | None:
    """How relevant ``other`` (content that is no shift note) is to ``report`` (0 to 1), or
    None when it names nobody the report is about: below a shift note that names them."""
    if not who.subjects or not _names_any(people, other, who.subjects):
        return None
    by_staff = any(people.same(other.author, s) for s in who.staff)
    gap = abs(other.timestamp - report.timestamp) / max(window_s, 1.0)
    score = 0.3 + 0.1 * by_staff + 0.3 * sim
    return round(min(1.0, score - 0.1 * min(gap, 1.0)), 4)


class _ByPlace:
    """Messages by place, each place's in time order, to find those within a window of a
    time without reading the others."""

    def __init__(self, ordered: Sequence[Message]) -> None:
        self._at: dict[str, tuple[list[float], list[Message]]] = {}
        for m in ordered:
            times, found = self._at.setdefault(place_of(m), ([], []))
            times.append(m.timestamp)
            found.append(m)

    def near(self, place: str, when: float, window_s: float) -> list[Message]:
        """The messages at ``place`` within ``window_s`` of ``when``, in time order."""
        times, found = self._at.get(place, ([], []))
        return found[bisect_left(times, when - window_s) : bisect_right(times, when + window_s)]


def incident_contexts(
    messages: Sequence[Message],
    *,
    similarity: Similarity,
    people: People,
    window_s: float = NOTE_WINDOW_S,
    now: float | None = None,
) -> list[Group]:
    """One ``incident_context`` group per incident report in ``messages`` (one collection):
    the report first (primary), then its shift notes in time order, then the other content
    about the people it involves in time order (supporting), with completeness (which only
    the notes decide), resolution status and re-processing priority set. Other columns
    (title, anchors, tags) are filled by :func:`~corpus_index.linked.describe.describe`. An
    incident still incomplete a week after its report (``now``) is no longer re-processed."""
    ordered = in_time_order(messages)
    candidates = _ByPlace([m for m in ordered if not m.system and m.source not in _NOT_GATHERED])
    out = []
    for report in ordered:
        if report.source != INCIDENT:
            continue
        who = involved(report)
        found: list[tuple[Message, float]] = []
        other: list[tuple[Message, float]] = []
        for near in candidates.near(place_of(report), report.timestamp, window_s):
            sim = similarity.pair(report.unit_id, near.unit_id)
            if near.source == SHIFT_NOTE:
                score = _relevance(people, report, near, who, sim, window_s)
                if score is not None:
                    found.append((near, score))
            else:
                score = _related(people, report, near, who, sim, window_s)
                if score is not None:
                    other.append((near, score))
        members = [Member(report.unit_id, 1, "initiator", primary=True, relevance=1.0)]
        members += [
            Member(m.unit_id, k + 2, "context", relevance=score)
            for k, (m, score) in enumerate([*found, *other])
        ]
        wrote = [n.author for n, _ in found]
        missing = [s for s in who.staff if not any(people.same(s, a) for a in wrote)]
        if not found:
            state = ("partial", "pending_context", PRIORITY_NO_CONTEXT)
        elif missing:
            state = ("partial", "open", PRIORITY_PARTIAL)
        else:
            state = ("complete", "resolved", 0)
        if now is not None and now - report.timestamp >= GIVE_UP_S:
            state = (state[0], state[1], 0)
        out.append(
            Group(
                group_type="incident_context",
                processing_profile=INCIDENT,
                members=tuple(members),
                completeness=state[0],
                resolution_status=state[1],
                reprocess_priority=state[2],
            )
        )
    return out
