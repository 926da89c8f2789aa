"""Linked groups as tables: a collection's groups with their tenancy and input text, their
members, and the block-like rows that put each group in the index beside its units (DESIGN §10b).

A group's tenant is its members' (a group never spans tenants: a grouping that mixes them is
split by tenant first), its ACL groups are the intersection of its members' and its tier the
most restrictive of theirs, so a group never shows a member to someone who could not see it.
Its id comes from its content: :func:`corpus_index.linked.groups.group_id` over the tenant,
collection, type and member ids.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index.hashing import canonical_json, chunk_ref, content_hash, input_hash, sha256_hex
from corpus_index.linked.group_input import FORMAT as GROUP_V1
from corpus_index.linked.group_input import TextFit, WithinChars, group_input
from corpus_index.linked.groups import Group, group_id
from corpus_index.linked.memo import Memo
from corpus_index.linked.messages import Message
from corpus_index.linked.people import NameResolver
from corpus_index.linked.settled import Settled
from corpus_index.records import BLOCK_SCHEMA, INPUT_SCHEMA

GROUP_KIND = "group"  # the ``kind`` of a group's row in a generation (units carry their kind's)
GROUP_INPUT_FORMAT = GROUP_V1  # the format the linked library writes
GROUP_BLOCK_KEY = "group"
# a group's text with no model's limit given: the input of the model we ship
# (all-MiniLM-L6-v2: 256 word pieces) at 4 characters a token
DEFAULT_FIT = WithinChars(256 * 4)
TIERS = ("public", "restricted")  # least to most restrictive

_ARROW_OF = {
    "str": pa.string(),
    "str | None": pa.string(),
    "float": pa.float64(),
    "float | None": pa.float64(),
    "int": pa.int64(),
    "int | None": pa.int64(),
    "bool": pa.bool_(),
    "tuple[str, ...]": pa.list_(pa.string()),
}


def _group_fields() -> list[tuple[str, pa.DataType]]:
    """The columns of seed §3.1 a :class:`Group` carries (whatever fields it has today; one
    of a type not listed above is stored as JSON text)."""
    return [
        (f.name, _ARROW_OF.get(str(f.type), pa.string()))
        for f in dataclasses.fields(Group)
        if f.name != "members"
    ]


GROUP_SCHEMA = pa.schema(
    [
        ("group_id", pa.string()),
        ("collection", pa.string()),
        ("source_id", pa.string()),  # ``<collection>/<group_id>``: how its index row is named
        ("tenant_id", pa.string()),
        ("acl_groups", pa.list_(pa.string())),
        ("tier", pa.string()),
        *_group_fields(),
        ("member_count", pa.int64()),
        ("input_format", pa.string()),
        ("input_text", pa.string()),
        ("input_hash", pa.string()),
        ("input_cut", pa.int64()),  # 1 when the input text was cut to the model's limit
        ("content_hash", pa.string()),
        ("chunk_ref", pa.string()),
    ]
)

MEMBER_SCHEMA = pa.schema(
    [
        ("group_id", pa.string()),
        ("collection", pa.string()),
        ("tenant_id", pa.string()),
        ("unit_id", pa.string()),
        ("order", pa.int64()),
        ("role", pa.string()),
        ("primary", pa.bool_()),
        ("relevance", pa.float64()),
    ]
)


class Unit(NamedTuple):
    """A unit as grouping and group tenancy see it: its message, its access scope and the
    document it came from."""

    message: Message
    tenant_id: str
    acl_groups: tuple[str, ...]
    tier: str
    doc_id: str = ""


class GroupTables(NamedTuple):
    """The ``linked_groups`` partitions of one collection."""

    groups: pa.Table
    members: pa.Table
    carried: int = 0  # settled groups, whose rows were the last run's, carried over as they were
    unmade: int = 0  # of those, the ones carried before their grouping made them


def generation_formats(input_format: str) -> list[str]:
    """The input formats a generation built on ``input_format`` holds rows of: its units'
    format and the groups' own."""
    return [input_format, GROUP_INPUT_FORMAT]


def most_restrictive(tiers: Iterable[str]) -> str:
    """The most restrictive of ``tiers`` (an unknown tier counts as restricted)."""
    rank = max((TIERS.index(t) if t in TIERS else len(TIERS) - 1 for t in tiers), default=0)
    return TIERS[rank]


def _day(stamp: float | None) -> str:
    if stamp is None:
        return ""
    return dt.datetime.fromtimestamp(stamp, dt.UTC).date().isoformat()


def group_tables(
    collection: str,
    units: Sequence[Unit],
    link: Callable[..., list[Group]],
    *,
    registries: Mapping[str, NameResolver] | None = None,
    names: Mapping[str, Callable[[str], str]] | None = None,
    memo_for: Callable[[str], Memo] | None = None,
    previous: pa.Table | None = None,
    previous_members: pa.Table | None = None,
    resolving: Mapping[str, str] | None = None,
    fit: TextFit = DEFAULT_FIT,
) -> GroupTables:
    """Group ``units`` by ``link`` one tenant at a time, and lay the groups out as tables.

    With ``registries`` (tenant -> its identity registry), ``link`` is given the tenant's
    registry (``registry=``), so groups anchor to its identities; with ``names`` (tenant -> a
    written name to the registry's name for that person) the ``group-v1`` text names each
    author so (a merge that renames a person changes the text of the groups they are in,
    which are then embedded again).

    With ``memo_for`` (tenant -> its :class:`~corpus_index.linked.memo.Memo`), ``link`` is
    also given a :class:`~corpus_index.linked.settled.Settled` (``settled=``; ``resolving``:
    tenant -> a digest of what its registry resolves and of the code that resolves it), and
    the memo keeps what settles each group whose row is made, a first run's too. With
    ``previous`` and ``previous_members`` (the groups and members this function gave last
    time) too, a settled group (every input as it was: the group, its members, their
    weighing and scopes, the names, its timing) is returned undescribed and its rows are
    carried over as Arrow (never decoded). Only the other groups' rows are made anew.

    ``fit`` makes each group's ``group-v1`` text fit the input of the models that embed it
    (a row made under another fit is never carried).

    Returns:
        The groups (GROUP_SCHEMA) and their members (MEMBER_SCHEMA), each sorted by group id
        (members then by order and unit id).
    """
    by_tenant: dict[str, list[Unit]] = {}
    for unit in units:
        by_tenant.setdefault(unit.tenant_id, []).append(unit)
    seen: set[str] = set()
    group_rows: list[dict[str, Any]] = []
    member_rows: list[dict[str, Any]] = []
    carried: list[str] = []  # groups whose rows are the last run's
    carried_members: list[str] = []  # ... and whose member rows are too
    unmade = 0  # ... of which carried before they were made (Settled.token)
    before: set[str] | None = None
    for tenant, mine in sorted(by_tenant.items()):
        scope = {u.message.unit_id: u for u in mine}
        registry = (registries or {}).get(tenant)
        options: dict[str, Any] = {} if registry is None else {"registry": registry}
        messages = _Named(scope, (names or {}).get(tenant))
        settled = None
        if memo_for is not None:  # only groups in both last tables can be carried whole
            whole = previous is not None and previous_members is not None
            if before is None and previous is not None:
                before = set(previous["group_id"].to_pylist())
            settled = Settled(
                memo_for(tenant),
                tenant,
                collection,
                ((resolving or {}).get(tenant, ""), _row_code(), fit.key),
                _scope_of(scope),
                (before or set()) if whole else set(),
            )
            options["settled"] = settled
        for group in link([u.message for u in mine], **options):
            if settled is not None:
                gid = settled.gid(group)
            else:
                gid = group_id(tenant, collection, group.group_type, group.member_ids)
            if gid in seen:
                continue  # the same members grouped twice the same way: one group
            seen.add(gid)
            if settled is not None and gid in settled.carried:
                carried.append(gid)
                carried_members.append(gid)
                continue
            group_rows.append(_group_row(collection, tenant, gid, group, scope, messages, fit))
            if settled is not None:  # a first run's too: the next carries what stays
                settled.settle(gid, group)
            member_rows.extend(
                {
                    "group_id": gid,
                    "collection": collection,
                    "tenant_id": tenant,
                    "unit_id": m.unit_id,
                    "order": m.order,
                    "role": m.role,
                    "primary": m.primary,
                    "relevance": float(m.relevance),
                }
                for m in group.members
            )
        for token in settled.tokens if settled is not None else ():
            # a group as it was, carried without being made (Settled.token)
            if token.gid not in seen:
                seen.add(token.gid)
                carried.append(token.gid)
                carried_members.append(token.gid)
                unmade += 1
    groups = _sorted(
        [_carried(previous, carried, GROUP_SCHEMA), pa.Table.from_pylist(group_rows, GROUP_SCHEMA)],
        ["group_id"],
    )
    members = _sorted(
        [
            _carried(previous_members, carried_members, MEMBER_SCHEMA),
            pa.Table.from_pylist(member_rows, MEMBER_SCHEMA),
        ],
        ["group_id", "order", "unit_id"],
    )
    return GroupTables(groups, members, len(carried), unmade)


def _scope_of(scope: Mapping[str, Unit]) -> Callable[[str], tuple[str, ...]]:
    """What a group's row reads of a member's access: its tier and ACL groups."""

    def of(unit: str) -> tuple[str, ...]:
        u = scope[unit]
        return (u.tier, *u.acl_groups)

    return of


class _Named(Mapping[str, Message]):
    """Unit id -> its message with the author as the registry names them (``name``; as
    written without one), made on first use: a run that keeps a group's row never needs its
    members' messages renamed."""

    def __init__(self, scope: Mapping[str, Unit], name: Callable[[str], str] | None) -> None:
        self._scope = scope
        self._name = name
        self._made: dict[str, Message] = {}

    def __getitem__(self, unit: str) -> Message:
        found = self._made.get(unit)
        if found is None:
            m = self._scope[unit].message
            found = m if self._name is None else replace(m, author=self._name(m.author))
            self._made[unit] = found
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._scope)

    def __len__(self) -> int:
        return len(self._scope)


def _carried(previous: pa.Table | None, ids: Sequence[str], schema: pa.Schema) -> pa.Table:
    """The rows of ``previous`` whose group is one of ``ids``, as ``schema`` lays them out."""
    if previous is None or not ids:
        return schema.empty_table()
    kept = previous.filter(pc.is_in(previous["group_id"], pa.array(ids, pa.string())))
    return kept.select(schema.names).cast(schema)


def _sorted(parts: Sequence[pa.Table], keys: Sequence[str]) -> pa.Table:
    """``parts`` (one schema) as one table sorted by ``keys`` (ascending)."""
    table = pa.concat_tables(parts)
    order = pc.sort_indices(table, [(k, "ascending") for k in keys])
    return table.take(order).combine_chunks()


@lru_cache(maxsize=1)
def _row_code() -> str:
    """sha256 of this module's code: other code makes other rows (a row carried from a run
    of other code would keep what that code made of it)."""
    return sha256_hex(Path(__file__).read_bytes())


def _group_row(
    collection: str,
    tenant: str,
    gid: str,
    group: Group,
    scope: Mapping[str, Unit],
    messages: Mapping[str, Message],
    fit: TextFit,
) -> dict[str, Any]:
    members = [scope[m] for m in group.member_ids]
    acl = set(members[0].acl_groups)
    for unit in members[1:]:
        acl &= set(unit.acl_groups)
    text, cut = group_input(group, messages, fit=fit)
    row: dict[str, Any] = {
        "group_id": gid,
        "collection": collection,
        "source_id": f"{collection}/{gid}",
        "tenant_id": tenant,
        "acl_groups": sorted(acl),
        "tier": most_restrictive(u.tier for u in members),
        "member_count": len(members),
        "input_format": GROUP_INPUT_FORMAT,
        "input_text": text,
        "input_hash": input_hash(GROUP_INPUT_FORMAT, text),
        "input_cut": int(cut),
    }
    for f in dataclasses.fields(Group):
        if f.name != "members":
            value = getattr(group, f.name)
            row[f.name] = list(value) if isinstance(value, tuple) else value
            if str(f.type) not in _ARROW_OF and value is not None:
                row[f.name] = canonical_json(value)
    row["content_hash"] = content_hash({"members": list(group.member_ids), "text": text})
    # the group id names its members, not what the row says of them: a summary, a score or
    # a scope changes while the members stay (a message elsewhere shifts the TF-IDF weights,
    # a member's ACL narrows). The version is a hash of the whole row, so a changed row has
    # a new chunk_ref (and vector_id), which index_rows writes in place of the old row.
    version = sha256_hex(canonical_json(row))[:16]
    row["chunk_ref"] = chunk_ref(collection, gid, version, GROUP_BLOCK_KEY)
    return row


def group_version(ref: str) -> str:
    """The version a group's ``chunk_ref`` names (what its index row's ``source_version``
    says): a hash of its row in ``linked_groups``."""
    return ref.removesuffix(f"/{GROUP_BLOCK_KEY}").rsplit("/", 1)[-1].removeprefix("v")


def group_metadata(row: Mapping[str, Any]) -> str:
    """The ``metadata`` JSON of a group's index row: its §3.1 columns and its input's cut."""
    skip = {"collection", "source_id", "tenant_id", "acl_groups", "tier", "input_text"}
    skip |= {"input_hash", "content_hash", "chunk_ref"}
    return json.dumps(
        {k: v for k, v in row.items() if k not in skip}, ensure_ascii=False, sort_keys=True
    )


def indexed(groups: pa.Table) -> pa.Table:
    """The groups that get an index row: those some principal may see whole (a group whose
    members share no ACL group is kept in the warehouse but never indexed)."""
    return groups.filter(pc.greater(pc.list_value_length(groups["acl_groups"]), 0))


def group_inputs(groups: pa.Table) -> pa.Table:
    """One ``embedding_inputs`` row (INPUT_SCHEMA) per indexed group, under ``group-v1``."""
    rows = indexed(groups)
    return pa.table(
        {
            "chunk_ref": rows["chunk_ref"],
            "source_id": rows["source_id"],
            "doc_id": rows["group_id"],
            "section": rows["group_type"],
            "block_key": pa.array([GROUP_BLOCK_KEY] * rows.num_rows, pa.string()),
            "content_hash": rows["content_hash"],
            "input_format": rows["input_format"],
            "input_hash": rows["input_hash"],
            "text": rows["input_text"],
        },
        schema=INPUT_SCHEMA,
    )


def group_blocks(groups: pa.Table, schema: pa.Schema = BLOCK_SCHEMA) -> pa.Table:
    """The block each indexed group stands as in ``schema``'s columns (of BLOCK_SCHEMA): what
    an index row reads of a block (scope, provenance, ``kind: group``, its §3.1 columns as
    ``metadata``)."""
    out: list[dict[str, Any]] = []
    for row in indexed(groups).to_pylist():
        block = {
            "collection": row["collection"],
            "doc_id": row["group_id"],
            "source_id": row["source_id"],
            "source_version": group_version(row["chunk_ref"]),
            "kind": GROUP_KIND,
            "source_type": row["group_type"],
            "section": row["group_type"],
            "block_key": GROUP_BLOCK_KEY,
            "content": canonical_json({"text": row["input_text"]}),
            "content_hash": row["content_hash"],
            "chunk_ref": row["chunk_ref"],
            "tenant_id": row["tenant_id"],
            "acl_groups": row["acl_groups"],
            "tier": row["tier"],
            "path": "",
            "line": 0,
            "language": "en",
            "event_date": row.get("event_date") or _day(row.get("earliest_content_at")),
            "metadata": group_metadata(row),
        }
        out.append({name: block[name] for name in schema.names})
    return pa.Table.from_pylist(out, schema)


def merged_by_doc(parts: Sequence[pa.Table]) -> pa.Table:
    """``parts`` (same schema) as one table in ``doc_id`` order, each document's rows in the
    order they had (the sort is stable): how group rows join their units' stream."""
    table = pa.concat_tables(parts)
    return table.take(pc.sort_indices(table, [("doc_id", "ascending")]))
