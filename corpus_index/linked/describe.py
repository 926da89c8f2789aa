"""Filling a group's descriptive columns (seed §3.1), extractively and without a network:
a title from its content, a summary (its most central unit, who, where, when), its identity
and location anchors, event dates, domain and topic tags, and coherence."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

from corpus_index.linked.messages import Message, day_of
from corpus_index.linked.people import People
from corpus_index.linked.records import Group
from corpus_index.linked.similarity import Similarity
from corpus_index.linked.tags import tags_of

TITLE_WORDS = 10
SUMMARY_CHARS = 280

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
_GREETING = re.compile(
    r"^(?:hi|hey|hello|dear|morning|good morning|g'day|thanks|thank you|ok|heads up)\b", re.I
)
_QUOTE = re.compile(r"^(?:re|fwd?):\s*", re.IGNORECASE)


def first_sentence(text: str, *, words: int = TITLE_WORDS) -> str:
    """The first sentence of ``text`` that says something (greetings and sign-offs of three
    words or fewer are skipped), cut to ``words`` words, without its closing punctuation."""
    for raw in _SENTENCE.findall(text):
        sentence = raw.strip()
        n = len(sentence.split())
        if n == 0 or (n <= 3 and _GREETING.match(sentence)):
            continue
        cut = sentence.split()
        out = " ".join(cut[:words]) + (" …" if len(cut) > words else "")
        return out.rstrip(".!,;: ")
    return text.strip()[:80]


def display(raw: str) -> str:
    """A person as a reader wants to see them: an e-mail header's name, else as written."""
    name = raw.split("<", 1)[0].strip()
    return name or raw.strip()


def nice_date(iso: str) -> str:
    """``2025-12-10`` -> ``10 Dec 2025``."""
    day = dt.date.fromisoformat(iso)
    return f"{day.day} {day.strftime('%b %Y')}"


def date_span(first: str | None, last: str | None) -> str:
    """A date or a range of dates, for reading."""
    if first is None:
        return ""
    if last is None or last == first:
        return nice_date(first)
    return f"{nice_date(first)} to {nice_date(last)}"


def title_of(
    group: Group,
    units: Sequence[Message],
    place: str,
    hint: str | None = None,
    central: Message | None = None,
) -> str:
    """A title from the content: the incident's or e-mail's own title, the question asked,
    or the opening of the conversation, at its place; a day at a place by its date. ``hint``
    is the sentence that says what the group is about, where its builder knows one;
    ``central`` the unit most like the others, whose opening serves when the first's is short."""
    lead = units[0]
    where = f" at {place}" if place else ""
    if group.group_type == "daily_context":
        return f"{place or 'Everywhere'} on {nice_date(day_of(lead))}"
    if group.group_type == "incident_context" and lead.title:
        return f"{lead.title}{where}"
    if hint:
        return f"{first_sentence(hint, words=14)}{where}"
    if lead.title:
        return f"{_QUOTE.sub('', lead.title)}{where}"
    opening = first_sentence(lead.text)
    if len(opening.split()) < 3 and central is not None:  # "Good point": says nothing alone
        opening = first_sentence(central.text)
    return f"{opening}{where}"


def describe(
    group: Group,
    by_id: Mapping[str, Message],
    *,
    similarity: Similarity,
    people: People,
    primary_person: str | None = None,
    title_hint: str | None = None,
) -> Group:
    """``group`` with its title, summary, anchors, dates, tags and coherence filled from its
    members (``by_id``: the collection's units).

    Args:
        primary_person: the person the group is about, as written (an incident's subject, a
            question's asker); resolved to an identity id where the registry knows them.
        title_hint: the sentence the title is taken from (a question's), if not the content's.
    """
    units = [by_id[i] for i in group.member_ids]
    ordered = sorted(units, key=lambda m: m.timestamp)
    places = tuple(dict.fromkeys(m.location.strip() for m in units if m.location.strip()))
    place = places[0] if len(places) == 1 else ""
    days = sorted(day_of(m) for m in units)
    anchors: list[str] = []
    for m in units:
        anchors.extend(people.anchors(m))
    authors = list(dict.fromkeys(display(m.author) for m in units if m.author))
    ids = list(group.member_ids)
    central_id, coherence = similarity.central_and_coherence(ids)
    central = by_id[central_id]
    text = " ".join(f"{m.title} {m.text}" for m in units)
    domains, topics = tags_of(text, tuple(m.source for m in units))
    span = date_span(days[0], days[-1])
    said = " ".join(central.text.split())
    if len(said) > SUMMARY_CHARS:
        said = said[: SUMMARY_CHARS - 1].rstrip() + "…"
    where = f" at {', '.join(places)}" if places else ""
    summary = (
        f"{display(central.author)}: {said}\n"
        f"{len(units)} unit(s) from {', '.join(authors[:6])}{where}, {span}."
    )
    primary = people.person(primary_person) if primary_person else None
    return replace(
        group,
        title=title_of(group, units, place, title_hint, central),
        summary=summary,
        identity_anchors=tuple(dict.fromkeys(anchors)),
        primary_identity=primary,
        location_anchors=places,
        event_date=days[0],
        event_date_end=days[-1],
        earliest_content_at=ordered[0].timestamp,
        latest_content_at=ordered[-1].timestamp,
        domain_tags=domains,
        topic_tags=topics,
        coherence=round(coherence, 4),
    )
