"""Rich context records (seed "Linked Context V2" §6.1 step 5): a linked group expanded into its
members in order with their text, its participants with their roles, place, dates and source
refs; a unit standing alone in the same shape.

Everything is read on behalf of one principal. A group's members are read from the generation
inside the same eligibility prefilter as every search (tenant, ACL groups, live collections,
not deleted), then each row is checked again here; a group with any member the principal may
not see (or that is no longer in the generation) is dropped whole, never shown in part.
Participants come from the tenant's identity mentions of the members shown, named from the
identities of the same collection.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import pyarrow.compute as pc

from corpus_index import predicates
from corpus_index.eligibility import Principal
from corpus_index.group_records import GROUP_KIND
from corpus_index.hits import Provenance
from corpus_index.home import Home
from corpus_index.identity_store import IDENTITIES, MENTIONS
from corpus_index.kinds import excerpt_of
from corpus_index.visible_people import shown_name

# the §6.2 response groups results by category; a group's category comes from its type, a
# unit's from its source
GROUP_CATEGORY = {
    "conversation": "conversations",
    "decision_thread": "decisions",
    "topic_cluster": "topics",
    "qa_pair": "questions",
    "incident_context": "incidents",
    "daily_context": "days",
}
UNIT_TYPE = {
    "incident_report": "incident",
    "shift_note": "shift_note",
    "resource_doc": "resource",
    "phone_call": "call",
}
UNIT_CATEGORY = {
    "incident": "incidents",
    "shift_note": "shift_notes",
    "resource": "resources",
    "call": "calls",
}
ROW_COLUMNS = [
    "vector_id",
    "chunk_ref",
    "source_id",
    "collection",
    "doc_id",
    "kind",
    "section",
    "block_key",
    "text",
    "tenant_id",
    "acl_groups",
    "event_date",
    "metadata",
    "source_version",
    "content_hash",
    "input_format",
    "backend_spec",
    "generation",
    "run_id",
]


@dataclass(frozen=True, slots=True)
class Participant:
    """A person in a context: the tenant's identity, its name, and the roles it plays there."""

    identity_id: str
    name: str
    roles: tuple[str, ...]
    mentions: int

    def to_json(self) -> dict[str, Any]:
        return {
            "identity_id": self.identity_id,
            "name": self.name,
            "roles": list(self.roles),
            "mentions": self.mentions,
        }


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """One unit of a context, in the context's reading order.

    ``provenance`` has one entry per chunk in ``chunk_refs`` (same order), each what a unit
    search's hit carries for that row: its source version, content hash, input format, backend,
    generation and run, read from the generation row the member was shown from."""

    unit_id: str
    order: int
    role: str
    source: str
    author: str
    timestamp: str
    text: str
    source_id: str
    chunk_refs: tuple[str, ...]
    provenance: tuple[Provenance, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "unit_id": self.unit_id,
            "order": self.order,
            "role": self.role,
            "source": self.source,
            "author": self.author,
            "timestamp": self.timestamp,
            "text": self.text,
            "source_id": self.source_id,
            "chunk_refs": list(self.chunk_refs),
            "provenance": [asdict(p) for p in self.provenance],
        }


@dataclass(slots=True)
class ContextRecord:
    """A search result in the seed's rich shape: a whole group, or a unit standing alone."""

    id: str  # the group id, or the unit id
    type: str  # the group type (conversation, qa_pair, ...) or the unit's (shift_note, ...)
    title: str
    participants: tuple[Participant, ...]
    location: str
    date: str
    date_end: str
    members: tuple[MemberRecord, ...]
    provenance: dict[str, Any]
    relevance: float = 0.0
    rank: int = 0
    topics: tuple[str, ...] = ()
    why: dict[str, Any] = field(default_factory=dict)

    @property
    def is_group(self) -> bool:
        return self.type in GROUP_CATEGORY

    @property
    def category(self) -> str:
        if self.is_group:
            return GROUP_CATEGORY[self.type]
        return UNIT_CATEGORY.get(self.type, "messages")

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "id": self.id,
            "type": self.type,
            "title": self.title,
            "participants": [p.to_json() for p in self.participants],
            "location": self.location,
            "date": self.date,
            "date_end": self.date_end,
            "members": [m.to_json() for m in self.members],
            "relevance": round(self.relevance, 6),
            "topics": list(self.topics),
            "provenance": self.provenance,
            "why": self.why,
        }


def grouped_json(records: Sequence[ContextRecord]) -> dict[str, list[dict[str, Any]]]:
    """Records by category (§6.2: conversations, incidents, shift notes ...), rank order kept."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        out.setdefault(r.category, []).append(r.to_json())
    return out


def may_see(row: Mapping[str, Any], principal: Principal) -> bool:
    """The eligibility rule checked again on a row already read inside the prefilter."""
    return row.get("tenant_id") == principal.tenant and bool(
        set(row.get("acl_groups") or ()) & set(principal.groups)
    )


def read_rows(table: Any, where: str) -> list[dict[str, Any]]:
    """Every row of the generation ``table`` matching ``where`` (a plain scan, no ranking).

    No cap: each caller's ``where`` names the documents it reads (a person's units, a page of
    groups and their members, the units of a page of hits), so what it reads is what it asked
    for; a cap would leave rows out without a word (a person in more units than it, shown in
    fewer, their roles and partners undercounted)."""
    rows: list[dict[str, Any]] = (
        table.search().where(where, prefilter=True).select(ROW_COLUMNS).limit(None).to_list()
    )
    return rows


def metadata_of(row: Mapping[str, Any]) -> dict[str, Any]:
    raw = row.get("metadata")
    try:
        meta = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        return {}
    return meta if isinstance(meta, dict) else {}


def unit_of(row: Mapping[str, Any]) -> str:
    """The unit id of a unit's row (its metadata's ``unit_id``, else its document id)."""
    return str(metadata_of(row).get("unit_id") or row["doc_id"])


def unit_rows(
    table: Any, where_eligible: str, collection: str, units: Iterable[str]
) -> dict[str, list[dict[str, Any]]]:
    """The visible rows of each unit of ``collection`` (a unit may be several blocks), in
    block order; a unit the principal may not see has none."""
    wanted = sorted(set(units))
    if not wanted:
        return {}
    where = predicates.all_of(
        [
            where_eligible,
            predicates.eq("collection", collection),
            predicates.is_in("doc_id", wanted),
            predicates.compare("kind", "!=", GROUP_KIND),
        ]
    )
    out: dict[str, list[dict[str, Any]]] = {}
    for row in read_rows(table, where):
        out.setdefault(unit_of(row), []).append(row)
    for rows in out.values():
        rows.sort(key=lambda r: str(r["block_key"]))
    return out


class GroupReads(NamedTuple):
    """What expanding some groups reads: their rows, their members, the members' rows."""

    groups: dict[tuple[str, str], dict[str, Any]]  # (collection, group id) -> the group's row
    members: dict[tuple[str, str], list[dict[str, Any]]]  # (collection, group id) -> members
    units: dict[tuple[str, str], list[dict[str, Any]]]  # (collection, unit id) -> its rows


def read_groups(
    home: Home,
    table: Any,
    where_eligible: str,
    principal: Principal,
    wanted: Iterable[tuple[str, str]],
    *,
    with_rows: bool = True,
) -> GroupReads:
    """The ``wanted`` groups (collection, group id) of the principal's tenant: their members
    (from the warehouse), and in one read of the generation ``table`` inside the eligibility
    prefilter (by ``doc_id``, which has a scalar index) the members' rows and, with
    ``with_rows``, the groups' own rows. A row the principal may not see is not read."""
    by_collection: dict[str, set[str]] = {}
    for collection, gid in wanted:
        by_collection.setdefault(collection, set()).add(gid)
    members: dict[tuple[str, str], list[dict[str, Any]]] = {}
    units: dict[str, set[str]] = {}
    for collection, gids in by_collection.items():
        table_m = home.warehouse.read_cached(
            "group_members",
            (collection,),
            where=(pc.field("tenant_id") == principal.tenant)
            & pc.field("group_id").isin(sorted(gids)),
            columns=["tenant_id", "group_id", "unit_id", "order", "role"],
        )
        for m in table_m.to_pylist() if table_m is not None else []:
            members.setdefault((collection, m["group_id"]), []).append(m)
            units.setdefault(collection, set()).add(m["unit_id"])
    ids = {u for us in units.values() for u in us}
    if with_rows:
        ids |= {g for gids in by_collection.values() for g in gids}
    out = GroupReads({}, members, {})
    if not ids:
        return out
    where = predicates.all_of(
        [
            where_eligible,
            predicates.is_in("collection", sorted(by_collection)),
            predicates.is_in("doc_id", sorted(ids)),
        ]
    )
    for row in read_rows(table, where):
        collection = str(row["collection"])
        if row["kind"] == GROUP_KIND:
            if with_rows and row["doc_id"] in by_collection[collection]:
                out.groups[(collection, str(row["doc_id"]))] = row
        elif row["doc_id"] in units.get(collection, ()):
            out.units.setdefault((collection, unit_of(row)), []).append(row)
    for rows in out.units.values():
        rows.sort(key=lambda r: str(r["block_key"]))
    return out


class People:
    """The identity mentions and names of a principal's tenant in some collections."""

    def __init__(self, home: Home, principal: Principal) -> None:
        self.home = home
        self.tenant = principal.tenant
        self._names: dict[str, dict[str, tuple[str, bool]]] = {}

    def names(self, collection: str) -> dict[str, tuple[str, bool]]:
        """Identity id -> its name in the registry, and whether the tenant's people file gives
        it (else a unit did: :meth:`of` shows it only where the mentions it is given show it)."""
        if collection not in self._names:
            table = self.home.warehouse.read_cached(
                IDENTITIES,
                (collection,),
                where=pc.field("tenant_id") == self.tenant,
                columns=["tenant_id", "identity_id", "name", "origin"],
            )
            rows = table.to_pylist() if table is not None else []
            self._names[collection] = {
                r["identity_id"]: (r["name"], r["origin"] == "people_file") for r in rows
            }
        return self._names[collection]

    def mentions(self, collection: str, units: Iterable[str]) -> list[dict[str, Any]]:
        """The tenant's mentions in ``units`` of ``collection``: unit, identity, role."""
        wanted = sorted(set(units))
        if not wanted:
            return []
        where = (pc.field("tenant_id") == self.tenant) & pc.field("unit_id").isin(wanted)
        table = self.home.warehouse.read_cached(
            MENTIONS,
            (collection,),
            where=where,
            columns=["tenant_id", "unit_id", "identity_id", "mention_type", "context_snippet"],
        )
        return table.to_pylist() if table is not None else []

    def of(self, collection: str, mentions: Sequence[Mapping[str, Any]]) -> tuple[Participant, ...]:
        """Participants of ``mentions`` (in the order they are first seen), with their roles.
        A person the people file does not name goes by the registry's name only where these
        mentions (of units the principal sees) show it, else by an address they show, else by
        the id: the registry may have taken the name from a unit the principal may not see."""
        names = self.names(collection)
        roles: dict[str, Counter[str]] = {}
        snippets: dict[str, list[str]] = {}
        for m in mentions:
            roles.setdefault(m["identity_id"], Counter())[m["mention_type"]] += 1
            snippets.setdefault(m["identity_id"], []).append(str(m.get("context_snippet") or ""))
        out = []
        for i, r in roles.items():
            name, listed = names.get(i, (i, True))
            out.append(
                Participant(
                    identity_id=i,
                    name=name if listed else shown_name(name, snippets[i]) or i,
                    roles=tuple(sorted(r, key=lambda x: (-r[x], x))),
                    mentions=sum(r.values()),
                )
            )
        return tuple(out)


def provenance(row: Mapping[str, Any]) -> dict[str, Any]:
    """A generation row's provenance (:class:`Provenance`) with its source id after its chunk."""
    own = asdict(Provenance.of_row(row))
    return {"chunk_ref": own.pop("chunk_ref"), "source_id": row["source_id"], **own}


def member_record(
    unit: str, order: int, role: str, rows: Sequence[Mapping[str, Any]]
) -> MemberRecord:
    """A unit of a context from its generation rows (its blocks, in block order), each row's
    provenance with it."""
    meta = metadata_of(rows[0])
    return MemberRecord(
        unit_id=unit,
        order=order,
        role=role,
        source=str(meta.get("source") or rows[0]["section"]),
        author=str(meta.get("author") or ""),
        timestamp=str(meta.get("timestamp") or rows[0].get("event_date") or ""),
        text="\n".join(excerpt_of(r) for r in rows),
        source_id=str(rows[0]["source_id"]),
        chunk_refs=tuple(str(r["chunk_ref"]) for r in rows),
        provenance=tuple(Provenance.of_row(r) for r in rows),
    )


def expand_groups(
    home: Home,
    table: Any,
    where_eligible: str,
    principal: Principal,
    group_rows: Sequence[Mapping[str, Any]],
    people: People,
    *,
    reads: GroupReads | None = None,
) -> tuple[list[ContextRecord], list[str]]:
    """Each group row expanded into a record, in the order given; and the ids of the groups
    dropped because a member is not visible to ``principal`` (or gone).

    Args:
        group_rows: rows of the generation (kind ``group``) read inside the eligibility prefilter.
        reads: the groups' members and their rows when :func:`read_groups` read them already
            (for these groups, or more); read here otherwise.
    """
    if reads is None:
        wanted = [(str(g["collection"]), str(g["doc_id"])) for g in group_rows]
        reads = read_groups(home, table, where_eligible, principal, wanted, with_rows=False)
    mentions: dict[tuple[str, str], list[dict[str, Any]]] = {}
    shown: dict[str, set[str]] = {}
    for g in group_rows:
        collection = str(g["collection"])
        mine = reads.members.get((collection, str(g["doc_id"])), [])
        shown.setdefault(collection, set()).update(m["unit_id"] for m in mine)
    for collection, units in shown.items():
        for m in people.mentions(collection, units):
            mentions.setdefault((collection, m["unit_id"]), []).append(m)
    out: list[ContextRecord] = []
    dropped: list[str] = []
    for g in group_rows:
        collection, gid = str(g["collection"]), str(g["doc_id"])
        mine = sorted(
            reads.members.get((collection, gid), []), key=lambda m: (m["order"], m["unit_id"])
        )
        seen = [reads.units.get((collection, m["unit_id"])) for m in mine]
        if (
            not mine
            or not may_see(g, principal)
            or any(not r or not all(may_see(x, principal) for x in r) for r in seen)
        ):
            dropped.append(gid)
            continue
        meta = metadata_of(g)
        said = [x for m in mine for x in mentions.get((collection, m["unit_id"]), [])]
        out.append(
            ContextRecord(
                id=gid,
                type=str(meta.get("group_type") or g["section"]),
                title=str(meta.get("title") or ""),
                participants=people.of(collection, said),
                location=", ".join(meta.get("location_anchors") or ()),
                date=str(meta.get("event_date") or g.get("event_date") or ""),
                date_end=str(meta.get("event_date_end") or meta.get("event_date") or ""),
                members=tuple(
                    member_record(m["unit_id"], m["order"], m["role"], r)
                    for m, r in zip(mine, seen, strict=True)
                    if r
                ),
                provenance={**provenance(g), "group_id": gid, "collection": collection},
                topics=tuple(meta.get("topic_tags") or ()),
            )
        )
    return out, dropped


def unit_record(
    row_group: Sequence[Mapping[str, Any]],
    people: People,
    mentions: Sequence[Mapping[str, Any]] | None = None,
) -> ContextRecord:
    """A unit standing alone as a record: itself its only member (``mentions``: the unit's,
    when read already)."""
    first = row_group[0]
    meta = metadata_of(first)
    unit = unit_of(first)
    collection = str(first["collection"])
    source = str(meta.get("source") or first["section"])
    member = member_record(unit, 1, "initiator", row_group)
    title = str(meta.get("title") or meta.get("subject") or "")
    return ContextRecord(
        id=unit,
        type=UNIT_TYPE.get(source, "message"),
        title=title or " ".join(member.text.split())[:80],
        participants=people.of(
            collection, people.mentions(collection, [unit]) if mentions is None else mentions
        ),
        location=str(meta.get("location") or ""),
        date=str(first.get("event_date") or ""),
        date_end=str(first.get("event_date") or ""),
        members=(member,),
        provenance={**provenance(first), "unit_id": unit, "collection": collection},
    )
