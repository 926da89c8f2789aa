"""The ``linked_groups`` step: a grouped collection's units linked into groups (conversations
and the other groupings of :func:`corpus_index.linked.groups.link_units`), with their members,
tenancy and ``group-v1`` input text (DESIGN §10b).

Three partitions: ``linked_groups`` (one row per group), ``group_members`` (one row per
member) and ``conversation_links`` (each message's link in its channel, see
:mod:`corpus_index.linked.relink`). A collection whose kind is not grouped gets them empty.
Conversations are linked again only from each channel's first changed message on (its
TF-IDF block), from the links of the last run: the same groups as a full re-link, at the
cost of the change. The other groupings read the whole collection on each run (grouping
reads a unit's neighbours, so a changed unit may change groups it is not a member of); an
unchanged group keeps its id and its input hash, so it is never embedded twice.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from corpus_index import gates
from corpus_index.group_gates import (
    group_acl_within_members,
    group_members_exist_and_are_live,
    groups_stay_within_one_tenant,
)
from corpus_index.group_records import GROUP_SCHEMA, MEMBER_SCHEMA, GroupTables, Unit, group_tables
from corpus_index.home import Home
from corpus_index.kinds import kind_of
from corpus_index.kinds.messages import message_of
from corpus_index.linked.groups import Group, link_units
from corpus_index.linked.messages import Message
from corpus_index.linked.relink import LINK_SCHEMA, Relinker, links_table, read_links
from corpus_index.records import BLOCK_SCHEMA, MANIFEST_SCHEMA, Block
from corpus_index.sources import live_documents

GROUPS = "linked_groups"
MEMBERS = "group_members"
LINKS = "conversation_links"


@dataclass(slots=True)
class LinkedGroupsOutcome:
    """What the ``linked_groups`` step did for one collection."""

    grouped: bool
    units: int = 0
    groups: int = 0
    members: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    unindexed: int = 0  # groups whose members share no ACL group (kept, never indexed)
    cut: int = 0  # groups whose input text was cut to the model's input limit
    relinked: int = 0  # messages whose conversation link was decided again (the rest reused)
    gates: list[gates.Gate] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)


def run(home: Home, collection: str) -> LinkedGroupsOutcome:
    """Link the collection's units, check the groups, and write both partitions when every
    check passes (otherwise the last good groups stay).

    Returns:
        Counts of units, groups (by type) and members, and the checks' outcomes.
    """
    if not kind_of(home.collection(collection)).grouped:
        home.warehouse.write(GROUPS, (collection,), GROUP_SCHEMA.empty_table())
        home.warehouse.write(MEMBERS, (collection,), MEMBER_SCHEMA.empty_table())
        home.warehouse.write(LINKS, (collection,), LINK_SCHEMA.empty_table())
        return LinkedGroupsOutcome(grouped=False)
    manifest = home.read("source_manifest", (collection,), MANIFEST_SCHEMA)
    live = set(live_documents(manifest))
    units = read_units(home.read("parsed_blocks", (collection,), BLOCK_SCHEMA))
    previous = read_links(home.warehouse.read(LINKS, (collection,), LINK_SCHEMA))
    tenant_of = {u.message.unit_id: u.tenant_id for u in units}
    sources = {u.message.unit_id: f"{collection}/{u.doc_id}" for u in units}
    relinkers: list[Relinker] = []

    def link(messages: Sequence[Message]) -> list[Group]:
        tenant = tenant_of[messages[0].unit_id] if messages else ""
        relinkers.append(Relinker(previous, sources=sources, tenant_id=tenant))
        return link_units(messages, relinker=relinkers[-1])

    tables = group_tables(collection, units, link)
    outcome = LinkedGroupsOutcome(
        grouped=True,
        units=len(units),
        groups=tables.groups.num_rows,
        members=tables.members.num_rows,
        by_type=dict(sorted(Counter(tables.groups["group_type"].to_pylist()).items())),
        unindexed=sum(1 for a in tables.groups["acl_groups"].to_pylist() if not a),
        cut=sum(1 for c in tables.groups["input_cut"].to_pylist() if c),
        relinked=sum(r.relinked for r in relinkers),
        gates=check(tables, [u for u in units if u.doc_id in live]),
    )
    if outcome.passed:
        home.warehouse.write(GROUPS, (collection,), tables.groups)
        home.warehouse.write(MEMBERS, (collection,), tables.members)
        home.warehouse.write(
            LINKS, (collection,), links_table(x for r in relinkers for x in r.links)
        )
    return outcome


def read_units(blocks: pa.Table) -> list[Unit]:
    """One unit per ``unit_id`` of ``blocks`` (a record cut into sections is one unit whose
    text is its sections' in order), with the scope of its first block."""
    units: dict[str, Unit] = {}
    texts: dict[str, list[str]] = {}
    for row in blocks.to_pylist():
        block = _block(row)
        message = message_of(block)
        texts.setdefault(message.unit_id, []).append(message.text)
        if message.unit_id not in units:
            units[message.unit_id] = Unit(
                message, block.tenant_id, block.acl_groups, block.tier, block.doc_id
            )
    return [
        u._replace(message=replace(u.message, text=" ".join(texts[i]))) if len(texts[i]) > 1 else u
        for i, u in units.items()
    ]


def _block(row: dict[str, Any]) -> Block:
    values = {k: v for k, v in row.items() if k != "source_id"}
    values["content"] = json.loads(str(row["content"]))
    values["metadata"] = json.loads(str(row["metadata"])) if row["metadata"] else {}
    values["acl_groups"] = tuple(row["acl_groups"] or ())
    return Block(**values)


def check(tables: GroupTables, live_units: list[Unit]) -> list[gates.Gate]:
    """The blocking checks of DESIGN §10b on one collection's groups, against its live units
    (the check that generations hold no group row without a group runs on ``index_rows``)."""
    by_id = {u.message.unit_id: u for u in live_units}
    return [
        group_members_exist_and_are_live(tables.members, by_id),
        groups_stay_within_one_tenant(
            tables.groups, tables.members, {i: u.tenant_id for i, u in by_id.items()}
        ),
        group_acl_within_members(
            tables.groups, tables.members, {i: (u.acl_groups, u.tier) for i, u in by_id.items()}
        ),
    ]
