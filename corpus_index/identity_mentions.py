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
    named in an incident report.

Headers that name nobody on file become discovered identities; addresses that are shared
mailboxes (the people file's ``lists``) are nobody. A discovered identity's confidence rises as
other kinds of source (an e-mail, then a phone call) see it again (:func:`corroborate`).
:func:`merge_identities` moves one identity's mentions to another and says which units and
groups must be re-indexed (seed §8.2).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from corpus_index.errors import IdentityError
from corpus_index.hashing import canonical_json, sha256_hex
from corpus_index.identities import (
    EVIDENCE_CONFIDENCE,
    Identity,
    IdentityRegistry,
    display_name,
    noisy_or,
    normalize_email,
    normalize_phone,
)

ROLES = ("author", "subject", "mentioned", "recipient", "witness")
SNIPPET_CHARS = 60  # either side of a name found in the text
SIGHTING_SOURCE_TYPE = "embedding_extraction"

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


@dataclass(frozen=True, slots=True)
class Sighting:
    """A person seen in a unit, as an external identity system reads it (seed §8.1)."""

    sighting_id: str
    tenant_id: str
    identity_id: str
    raw_name: str | None
    email: str | None
    phone: str | None
    context: str
    source_type: str  # always SIGHTING_SOURCE_TYPE: how the sighting was made
    source_id: str  # the unit
    unit_source: str  # discord_chat, email_thread, ...
    mention_type: str
    confidence: int  # 0-100, as the seed's recordSighting takes it
    seen_at: str


SIGHTING_SCHEMA = pa.schema(
    [
        ("sighting_id", pa.string()),
        ("tenant_id", pa.string()),
        ("identity_id", pa.string()),
        ("raw_name", pa.string()),
        ("email", pa.string()),
        ("phone", pa.string()),
        ("context", pa.string()),
        ("source_type", pa.string()),
        ("source_id", pa.string()),
        ("unit_source", pa.string()),
        ("mention_type", pa.string()),
        ("confidence", pa.int8()),
        ("seen_at", pa.string()),
    ]
)


class Extraction(NamedTuple):
    """What :func:`extract_mentions` found."""

    mentions: list[IdentityMention]
    sightings: list[Sighting]


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
    # discovery in time order, so a discovered identity's key (its first detail seen) does not
    # depend on the order of files or records
    records = sorted(records, key=lambda r: (str(r.get("timestamp") or ""), str(r["id"])))
    for rec in records:
        for raw in _headers(rec):
            _resolve_or_discover(registry, raw)
    forms = _surface_forms(registry)
    mentions: list[IdentityMention] = []
    sightings: list[Sighting] = []
    for rec in records:
        unit = str(rec["id"])
        evidence = _header_evidence(registry, rec) + _text_evidence(registry, forms, rec)
        found = _combine(registry.tenant_id, unit, evidence)
        mentions.extend(found)
        sightings.extend(_sightings(registry.tenant_id, rec, evidence, found))
    return Extraction(mentions, sightings)


def _headers(rec: Mapping[str, Any]) -> list[str]:
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
            registry.learn(person.id, email_=addr, phone=phone)  # grown by what it is seen with
        return match.identity_id, match.reason, match.confidence
    if match.candidates:  # ambiguous between people on file: not a new person
        return None, match.reason, 0.0
    person = registry.discover(raw, email_=addr, phone=phone)
    if person is None:
        return None, "no name", 0.0
    return person.id, "discovered", EVIDENCE_CONFIDENCE["discovered"]


def _header_evidence(registry: IdentityRegistry, rec: Mapping[str, Any]) -> list[_Evidence]:
    out: list[_Evidence] = []
    fields = [("author", "author", [rec.get("author")])]
    fields.append(("recipients", "recipient", list(rec.get("recipients") or ())))
    fields.append(("cc", "mentioned", list(rec.get("cc") or ())))
    for field_name, role, values in fields:
        for raw in values:
            if not raw:
                continue
            pid, how, conf = _resolve_or_discover(registry, str(raw))
            if pid is not None:
                snippet = f"{field_name}: {raw}"
                out.append(_Evidence(pid, role, how, conf, snippet, str(raw), "header"))
    return out


class _Form(NamedTuple):
    pattern: re.Pattern[str]
    identity_id: str
    how: str


def _surface_forms(registry: IdentityRegistry) -> list[_Form]:
    """Names, aliases and addresses to look for in text, longest first.

    Multi-word names match in any case; a one-word alias only as written ("Grace", "SJ"), so
    the word "grace" or "sj" in passing is not taken for a person. A form that several people
    share names nobody.
    """
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
    forms = []
    for (form, nocase), ids in sorted(owners.items(), key=lambda kv: (-len(kv[0][0]), kv[0])):
        if len(ids) != 1:
            continue
        flags = re.IGNORECASE if nocase else 0
        pattern = re.compile(r"(?<![\w.@])@?" + re.escape(form) + r"(?![\w@])", flags)
        forms.append(_Form(pattern, next(iter(ids)), how_of[(form, nocase)]))
    return forms


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
    registry: IdentityRegistry, forms: Sequence[_Form], rec: Mapping[str, Any]
) -> list[_Evidence]:
    out: list[_Evidence] = []
    source = str(rec.get("source") or "")
    for where in ("title", "subject", "text"):
        text = rec.get(where)
        if not isinstance(text, str) or not text:
            continue
        taken: list[tuple[int, int]] = []
        present = [(m.start(), m.end()) for m in _PRESENT.finditer(text)]
        for form in forms:
            for m in form.pattern.finditer(text):
                if any(s < m.end() and m.start() < e for s, e in taken):
                    continue  # inside a longer name already found ("Sarah" in "Sarah Jones")
                taken.append((m.start(), m.end()))
                person = registry.get(form.identity_id)
                if person is None:
                    continue
                was_present = any(s <= m.start() < e for s, e in present)
                role = _text_role(person, source, where, was_present)
                conf = EVIDENCE_CONFIDENCE[form.how]
                snippet = _snippet(text, m)
                out.append(_Evidence(person.id, role, form.how, conf, snippet, m.group(), "text"))
        for m in _PHONE_IN_TEXT.finditer(text):
            number = normalize_phone(m.group(), country_code=registry.country_code)
            match = registry.resolve(email_=None, phone=number) if number else None
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
    tenant_id: str,
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
        phone = normalize_phone(ev.raw)
        name = None if phone else (display_name(ev.raw) or None)
        sid = "sgt_" + sha256_hex(canonical_json([mention.mention_id, ev.raw]))[:24]
        out.append(
            Sighting(
                sighting_id=sid,
                tenant_id=tenant_id,
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
def corroborate(registry: IdentityRegistry, sightings: Iterable[Sighting]) -> dict[str, float]:
    """Raise each discovered identity's confidence by the kinds of source that saw it.

    Each kind of source (e-mail, phone call, chat ...) that saw a discovered person adds the
    discovery confidence, combined (noisy-or): seen in one e-mail, 0.5; also in a phone call,
    0.75; also in chat, 0.875. Sightings in more units of one kind add nothing: one mailbox
    repeating a name is not corroboration. People on file keep 1.0. Returns the new confidence
    of every identity changed.
    """
    kinds: dict[str, set[str]] = defaultdict(set)
    for s in sightings:
        kinds[registry.canonical(s.identity_id)].add(s.unit_source)
    changed: dict[str, float] = {}
    for pid, sources in kinds.items():
        person = registry.get(pid)
        if person is None or person.origin != "discovered":
            continue
        confidence = noisy_or([EVIDENCE_CONFIDENCE["discovered"]] * len(sources))
        if confidence != person.confidence:
            registry.put(replace(person, confidence=confidence))
            changed[pid] = confidence
    return changed


# ---------------------------------------------------------------------- merges
class MergeReport(NamedTuple):
    """What a merge changed: the re-indexing it asks for (seed §8.2)."""

    survivor: str
    merged: str
    moved: int  # mentions now anchored to the survivor
    units: tuple[str, ...]  # units whose identity anchors changed
    groups: tuple[str, ...]  # groups whose identity anchors must be recomputed and re-indexed


def merge_identities(
    registry: IdentityRegistry,
    mentions: Iterable[IdentityMention],
    merged: str,
    survivor: str,
    *,
    group_members: Mapping[str, Iterable[str]] | None = None,
) -> tuple[list[IdentityMention], MergeReport]:
    """Merge identity ``merged`` into ``survivor``: details, mentions and later lookups.

    The survivor takes the merged identity's name (as an alias), aliases, e-mails and phones;
    the merged id keeps resolving to it. Each mention of the merged identity moves to the
    survivor; where the survivor already has that role in that unit the two become one, with
    the higher confidence. ``group_members`` (group id -> member unit ids) names the groups
    holding an affected unit; mentions already attached to a group count too.

    Raises:
        IdentityError: either id is not an identity of this registry's tenant, they are the
            same, or a mention is of another tenant.
    """
    a, b = _identity(registry, merged), _identity(registry, survivor)
    if a.id == b.id:
        raise IdentityError(f"cannot merge identity {a.id!r} into itself")
    registry.put(
        replace(
            b,
            aliases=_union(b.aliases, (a.name, *a.aliases)),
            emails=_union(b.emails, a.emails),
            phones=_union(b.phones, a.phones),
            confidence=max(a.confidence, b.confidence),
        )
    )
    registry.remove(a.id, merged_into=b.id)
    kept: dict[tuple[str, str, str], IdentityMention] = {}
    units: set[str] = set()
    groups: set[str] = set()
    moved = 0
    for m in mentions:
        if m.tenant_id != registry.tenant_id:
            raise IdentityError(
                f"mention {m.mention_id} is of tenant {m.tenant_id!r}, not {registry.tenant_id!r}"
            )
        if m.identity_id == a.id:
            moved += 1
            units.add(m.unit_id)
            if m.group_id:
                groups.add(m.group_id)
            m = replace(
                m,
                identity_id=b.id,
                mention_id=mention_id(m.tenant_id, m.unit_id, b.id, m.mention_type),
            )
        key = (m.unit_id, m.identity_id, m.mention_type)
        other = kept.get(key)
        if other is None or m.confidence > other.confidence:
            kept[key] = m
    for gid, members in (group_members or {}).items():
        if units.intersection(members):
            groups.add(gid)
    report = MergeReport(b.id, a.id, moved, tuple(sorted(units)), tuple(sorted(groups)))
    return list(kept.values()), report


def _identity(registry: IdentityRegistry, pid: str) -> Identity:
    person = registry.get(pid)
    if person is None:
        raise IdentityError(
            f"no identity {pid!r} in tenant {registry.tenant_id!r}; merges never cross tenants"
        )
    return person


def _union(first: Sequence[str], more: Iterable[str]) -> tuple[str, ...]:
    out = list(first)
    for x in more:
        if x not in out:
            out.append(x)
    return tuple(out)


# ---------------------------------------------------------------------- tables
def mentions_table(mentions: Iterable[IdentityMention]) -> pa.Table:
    """Mentions as a table of ``MENTION_SCHEMA``."""
    rows = list(mentions)
    return pa.Table.from_pylist(
        [{name: getattr(m, name) for name in MENTION_SCHEMA.names} for m in rows],
        schema=MENTION_SCHEMA,
    )


def sightings_table(sightings: Iterable[Sighting]) -> pa.Table:
    """Sightings as a table of ``SIGHTING_SCHEMA`` (what an identity system reads)."""
    rows = list(sightings)
    return pa.Table.from_pylist(
        [{name: getattr(s, name) for name in SIGHTING_SCHEMA.names} for s in rows],
        schema=SIGHTING_SCHEMA,
    )


def write_sightings(sightings: Iterable[Sighting], path: Path) -> Path:
    """Write sightings as one Parquet file (written aside, then renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(sightings_table(sightings), tmp)
    tmp.replace(path)
    return path
