"""Identity mentions: who each message unit is by, to and about (seed "Linked Context" §3.3).

``extract_mentions`` reads message records (the ``messages`` kind's JSONL fields: ``author``,
``recipients``, ``cc``, ``text``, ``title``/``subject``, ``source``) against one tenant's
:class:`~corpus_index.identities.IdentityRegistry` and returns, per unit, one mention per
(identity, role) with a confidence, the reason for the match and a context snippet, plus the
sightings an external identity system reads (seed §8.1).

Roles:
    ``author``: the record's author. ``recipient``: its recipients. ``mentioned``: CC'd people
    (e-mail), and names, addresses and numbers found in the text. ``subject``: people we support
    named in an incident report, a shift note, or a title or e-mail subject. ``witness``: staff
    on an incident report's "Staff present:" line.

Headers that name nobody on file become discovered identities; addresses that are shared
mailboxes (the people file's ``lists``) are nobody. Sightings and the corroboration of
discovered identities are in ``identity_sightings``; merges in ``identity_merges``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa

from corpus_index.hashing import canonical_json, sha256_hex
from corpus_index.identities import (
    EVIDENCE_CONFIDENCE,
    Identity,
    IdentityRegistry,
    noisy_or,
    records_table,
)
from corpus_index.identity_forms import display_name, normalize_email, normalize_phone
from corpus_index.identity_sightings import SIGHTING_SOURCE_TYPE, Sighting

ROLES = ("author", "subject", "mentioned", "recipient", "witness")
SNIPPET_CHARS = 60  # either side of a name found in the text

_PHONE_IN_TEXT = re.compile(
    r"(?<![\w+])(?:\+\d{2}[\s-]?|0)\(?\d{1,4}\)?(?:[\s-]?\d{2,4}){2,3}(?!\w)"
)
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class IdentityMention:
    """One identity in one role in one unit (UNIQUE per unit, identity and role)."""

    mention_id: str
    tenant_id: str
    unit_id: str
    identity_id: str
    mention_type: str
    confidence: float
    match_reasoning: str
    context_snippet: str
    group_id: str | None = None


MENTION_SCHEMA = pa.schema(
    [
        ("mention_id", pa.string()),
        ("tenant_id", pa.string()),
        ("unit_id", pa.string()),
        ("group_id", pa.string()),
        ("identity_id", pa.string()),
        ("mention_type", pa.string()),
        ("confidence", pa.float64()),
        ("match_reasoning", pa.string()),
        ("context_snippet", pa.string()),
    ]
)


class Extraction(NamedTuple):
    """What :func:`extract_mentions` found."""

    mentions: Sequence[IdentityMention]
    sightings: Sequence[Sighting]
    # the header values read (author, recipients, cc), in the order they were first seen:
    # the order discovery went in, which a later pass replays to resume (``identity_resume``)
    headers: tuple[str, ...] = ()


def mention_id(tenant_id: str, unit_id: str, identity_id: str, mention_type: str) -> str:
    """Content-derived id of a mention: its tenant, unit, identity and role."""
    return "mnt_" + sha256_hex(canonical_json([tenant_id, unit_id, identity_id, mention_type]))[:24]


class _Evidence(NamedTuple):
    identity_id: str
    role: str
    how: str
    confidence: float
    snippet: str
    raw: str
    channel: str  # "header" or "text": evidence from different channels is independent


def extract_mentions(
    registry: IdentityRegistry, records: Iterable[Mapping[str, Any]]
) -> Extraction:
    """Mentions and sightings of ``registry``'s people in ``records`` (one tenant's units).

    Two passes: first every header (author, recipients, cc) is resolved, discovering whoever is
    not on file, so that the text of any record can then name a discovered person; then each
    record's headers and text become mentions.
    """
    ordered = in_order(records)
    raws = header_values(ordered)
    discover(registry, raws)
    return mentions_in(registry, ordered, resolve_headers(registry, raws))


def record_key(rec: Mapping[str, Any]) -> tuple[str, str]:
    """Where a record falls in the order of :func:`in_order`."""
    return str(rec.get("timestamp") or ""), str(rec["id"])


class InOrder(list[Mapping[str, Any]]):
    """Records in the order of :func:`in_order`, as it gives them: ordered again, they are
    taken as they are (a record's key is read once a pass, not once per step of it)."""


def in_order(records: Iterable[Mapping[str, Any]]) -> InOrder:
    """``records`` in time order (then by id): discovery goes in this order, so a discovered
    identity's key (its first detail seen) does not depend on the order of files or records."""
    if isinstance(records, InOrder):
        return records
    return InOrder(sorted(records, key=record_key))


def header_values(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The header values of ``records`` (author, recipients, cc), each once, in order."""
    return list(dict.fromkeys(raw for rec in records for raw in record_headers(rec)))


def discover(registry: IdentityRegistry, raws: Iterable[str]) -> None:
    """Resolve each header value in turn, adding whoever is not on file to ``registry`` (and
    the addresses and numbers a discovered person is seen with)."""
    for raw in raws:  # once each: a second sight of the same text adds nothing
        _resolve_or_discover(registry, raw)


def resolve_headers(
    registry: IdentityRegistry, raws: Iterable[str]
) -> dict[str, tuple[str | None, str, float]]:
    """Whom each header value names, with discovery done: ``(identity id or None, how,
    confidence)``, the same for every record."""
    return {raw: _resolve_or_discover(registry, raw) for raw in raws}


def mentions_in(
    registry: IdentityRegistry,
    records: Sequence[Mapping[str, Any]],
    headers: Mapping[str, tuple[str | None, str, float]],
) -> Extraction:
    """The mentions and sightings of ``records`` (in order), their headers resolved as
    ``headers`` says (:func:`resolve_headers` of every header value they hold)."""
    forms = _TextForms(registry)
    mentions: list[IdentityMention] = []
    sightings: list[Sighting] = []
    for rec in records:
        unit = str(rec["id"])
        evidence = _header_evidence(headers, rec) + _text_evidence(registry, forms, rec)
        found = _combine(registry.tenant_id, unit, evidence)
        mentions.extend(found)
        sightings.extend(_sightings(registry, rec, evidence, found))
    return Extraction(mentions, sightings, tuple(headers))


def record_headers(rec: Mapping[str, Any]) -> list[str]:
    """One record's header values (author, recipients, cc), in that order, as written."""
    values = [rec.get("author"), *(rec.get("recipients") or ()), *(rec.get("cc") or ())]
    return [str(v) for v in values if v]


def _resolve_or_discover(registry: IdentityRegistry, raw: str) -> tuple[str | None, str, float]:
    if registry.is_list(raw):
        return None, "shared mailbox", 0.0
    addr = normalize_email(raw) if "@" in raw else None
    phone = normalize_phone(raw, country_code=registry.country_code)
    match = registry.resolve(raw)
    if match.identity_id is not None:
        person = registry.get(match.identity_id)
        if person is not None and person.origin == "discovered":
            registry.learn(person.id, address=addr, phone=phone)  # grown by what it is seen with
        return match.identity_id, match.reason, match.confidence
    if match.candidates:  # ambiguous between people on file: not a new person
        return None, match.reason, 0.0
    person = registry.discover(raw, address=addr, phone=phone)
    if person is None:
        return None, "no name", 0.0
    return person.id, "discovered", EVIDENCE_CONFIDENCE["discovered"]


def _header_evidence(
    headers: Mapping[str, tuple[str | None, str, float]], rec: Mapping[str, Any]
) -> list[_Evidence]:
    out: list[_Evidence] = []
    fields = [("author", "author", [rec.get("author")])]
    fields.append(("recipients", "recipient", list(rec.get("recipients") or ())))
    fields.append(("cc", "mentioned", list(rec.get("cc") or ())))
    for field_name, role, values in fields:
        for raw in values:
            if not raw:
                continue
            pid, how, conf = headers[str(raw)]
            if pid is not None:
                snippet = f"{field_name}: {raw}"
                out.append(_Evidence(pid, role, how, conf, snippet, str(raw), "header"))
    return out


class _TextForms:
    """Names, aliases and addresses to look for in text, as one pattern per case rule.

    Multi-word names and addresses match in any case; a one-word alias only as written
    ("Grace", "SJ"), so the word "grace" or "sj" in passing is not taken for a person. A form
    several people share names nobody. Within a pattern longer forms are tried first, and the
    any-case pattern (full names) runs first, so "Sarah" inside "Sarah Jones" is not found again.
    """

    def __init__(self, registry: IdentityRegistry) -> None:
        owners: dict[tuple[str, bool], set[str]] = defaultdict(set)
        how_of: dict[tuple[str, bool], str] = {}
        for p in registry:
            for form, how in [(p.name, "name"), *((a, "alias") for a in p.aliases)]:
                form = form.strip()
                if len(form) < 2:
                    continue
                key = (form.casefold(), True) if " " in form else (form, False)
                owners[key].add(p.id)
                how_of.setdefault(key, how)
            for addr in p.emails:
                owners[(addr, True)].add(p.id)
                how_of[(addr, True)] = "email"
        self._tables: list[tuple[re.Pattern[str], dict[str, tuple[str, str]], bool]] = []
        for nocase in (True, False):
            table = {
                form: (next(iter(ids)), how_of[(form, nc)])
                for (form, nc), ids in owners.items()
                if nc is nocase and len(ids) == 1
            }
            if not table:
                continue
            alternation = "|".join(re.escape(f) for f in sorted(table, key=lambda f: (-len(f), f)))
            flags = re.IGNORECASE if nocase else 0
            pattern = re.compile(rf"(?<![\w.@])@?(?P<form>{alternation})(?![\w@])", flags)
            self._tables.append((pattern, table, nocase))

    def find(self, text: str) -> Iterator[tuple[re.Match[str], str, str]]:
        """Each ``(match, identity id, how)`` in ``text``, never two overlapping."""
        taken: list[tuple[int, int]] = []
        for pattern, table, nocase in self._tables:
            for m in pattern.finditer(text):
                if any(s < m.end() and m.start() < e for s, e in taken):
                    continue
                taken.append((m.start(), m.end()))
                form = m.group("form")
                pid, how = table[form.casefold() if nocase else form]
                yield m, pid, how


_PRESENT = re.compile(r"\bstaff(?: present)?\s*:[^\n]*", re.IGNORECASE)


def _text_role(person: Identity, source: str, where: str, present: bool) -> str:
    """Participants are the subject of incident reports, shift notes, titles and subjects;
    staff on an incident report's "Staff present:" line are witnesses; the rest is mentioned."""
    if where in ("title", "subject") or source in ("incident_report", "shift_note"):
        if person.role == "participant":
            return "subject"
        if source == "incident_report" and present:
            return "witness"
    return "mentioned"


def _text_evidence(
    registry: IdentityRegistry, forms: _TextForms, rec: Mapping[str, Any]
) -> list[_Evidence]:
    out: list[_Evidence] = []
    source = str(rec.get("source") or "")
    for where in ("title", "subject", "text"):
        text = rec.get(where)
        if not isinstance(text, str) or not text:
            continue
        present = [(m.start(), m.end()) for m in _PRESENT.finditer(text)]
        for m, pid, how in forms.find(text):
            person = registry.get(pid)
            if person is None:
                continue
            was_present = any(s <= m.start() < e for s, e in present)
            role = _text_role(person, source, where, was_present)
            conf = EVIDENCE_CONFIDENCE[how]
            out.append(_Evidence(person.id, role, how, conf, _snippet(text, m), m.group(), "text"))
        for m in _PHONE_IN_TEXT.finditer(text):
            number = normalize_phone(m.group(), country_code=registry.country_code)
            match = registry.resolve(phone=number) if number else None
            if match is not None and match.identity_id is not None:
                person = registry.get(match.identity_id)
                role = _text_role(person, source, where, False) if person else "mentioned"
                out.append(
                    _Evidence(
                        match.identity_id,
                        role,
                        "phone",
                        match.confidence,
                        _snippet(text, m),
                        m.group(),
                        "text",
                    )
                )
    return out


def _snippet(text: str, m: re.Match[str]) -> str:
    start, end = max(0, m.start() - SNIPPET_CHARS), min(len(text), m.end() + SNIPPET_CHARS)
    body = _SPACES.sub(" ", text[start:end]).strip()
    return ("…" if start > 0 else "") + body + ("…" if end < len(text) else "")


def _combine(tenant_id: str, unit: str, evidence: Sequence[_Evidence]) -> list[IdentityMention]:
    """One mention per (identity, role); independent evidence corroborates (noisy-or).

    Evidence is independent across channels (a header, the text): within one channel the best
    piece counts, so a name repeated in the text is not more certain than said once.

    ``mentioned`` is dropped for an identity that has another role in the unit (an author's own
    signature does not mention them).
    """
    by_key: dict[tuple[str, str], list[_Evidence]] = defaultdict(list)
    for ev in evidence:
        by_key[(ev.identity_id, ev.role)].append(ev)
    roles_of: dict[str, set[str]] = defaultdict(set)
    for pid, role in by_key:
        roles_of[pid].add(role)
    out = []
    for (pid, role), evs in sorted(by_key.items()):
        if role == "mentioned" and len(roles_of[pid]) > 1:
            continue
        best: dict[str, _Evidence] = {}
        for ev in evs:
            if ev.channel not in best or ev.confidence > best[ev.channel].confidence:
                best[ev.channel] = ev
        kinds = sorted(best.values(), key=lambda e: (-e.confidence, e.how))
        out.append(
            IdentityMention(
                mention_id=mention_id(tenant_id, unit, pid, role),
                tenant_id=tenant_id,
                unit_id=unit,
                identity_id=pid,
                mention_type=role,
                confidence=noisy_or(e.confidence for e in kinds),
                match_reasoning=" + ".join(f"{e.how} {e.raw!r}" for e in kinds),
                context_snippet=kinds[0].snippet,
            )
        )
    return out


def _sightings(
    registry: IdentityRegistry,
    rec: Mapping[str, Any],
    evidence: Sequence[_Evidence],
    mentions: Sequence[IdentityMention],
) -> list[Sighting]:
    kept = {(m.identity_id, m.mention_type): m for m in mentions}
    out = []
    seen: set[tuple[str, str, str]] = set()
    for ev in evidence:
        mention = kept.get((ev.identity_id, ev.role))
        if mention is None or (ev.identity_id, ev.role, ev.raw) in seen:
            continue
        seen.add((ev.identity_id, ev.role, ev.raw))
        addr = normalize_email(ev.raw) if "@" in ev.raw else None
        phone = normalize_phone(ev.raw, country_code=registry.country_code)
        name = None if phone else (display_name(ev.raw) or None)
        sid = "sgt_" + sha256_hex(canonical_json([mention.mention_id, ev.raw]))[:24]
        out.append(
            Sighting(
                sighting_id=sid,
                tenant_id=registry.tenant_id,
                identity_id=ev.identity_id,
                raw_name=name,
                email=addr,
                phone=phone,
                context=ev.snippet,
                source_type=SIGHTING_SOURCE_TYPE,
                source_id=mention.unit_id,
                unit_source=str(rec.get("source") or ""),
                mention_type=ev.role,
                confidence=round(ev.confidence * 100),
                seen_at=str(rec.get("timestamp") or ""),
            )
        )
    return out


# ---------------------------------------------------------------------- corroboration


def mentions_table(mentions: Iterable[IdentityMention]) -> pa.Table:
    """Mentions as a table of ``MENTION_SCHEMA``."""
    return records_table(mentions, MENTION_SCHEMA)
