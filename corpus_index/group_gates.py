"""Blocking checks on a collection's linked groups (DESIGN §10b), as plain functions.

Each takes the ``linked_groups`` tables (groups: GROUP_SCHEMA, members: MEMBER_SCHEMA) and
what they are checked against, and returns a :class:`~corpus_index.gates.Gate`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index.gates import Gate

LINKED_GROUP_GATES = [
    (
        "group_members_exist_and_are_live",
        "Every member of a group is a live unit of the collection.",
    ),
    ("groups_stay_within_one_tenant", "No group has members of two tenants, or of another tenant."),
    (
        "group_acl_within_members",
        "Each group's ACL groups are within each member's, and its tier is at least as "
        "restrictive as each member's.",
    ),
    (
        "group_rows_have_groups",
        "No group row of a generation names a group that linked_groups does not hold.",
    ),
]


# the live units a collection's groups are checked against, one row per unit
UNIT_SCOPE_SCHEMA = pa.schema(
    [
        ("unit_id", pa.string()),
        ("tenant_id", pa.string()),
        ("acl_groups", pa.list_(pa.string())),
        ("tier", pa.string()),
    ]
)


def unit_scopes(rows: Iterable[tuple[str, str, Sequence[str], str]]) -> pa.Table:
    """The live units as a table of :data:`UNIT_SCOPE_SCHEMA`, from (unit id, tenant,
    ACL groups, tier) rows."""
    ids, tenants, acls, tiers = [], [], [], []
    for unit, tenant, acl, tier in rows:
        ids.append(unit)
        tenants.append(tenant)
        acls.append(acl)
        tiers.append(tier)
    return pa.table([ids, tenants, acls, tiers], schema=UNIT_SCOPE_SCHEMA)


def group_members_exist_and_are_live(members: pa.Table, units: pa.Table) -> Gate:
    """``units``: the live units (:data:`UNIT_SCOPE_SCHEMA`, only ``unit_id`` read)."""
    ids = members["unit_id"]
    gone = pc.filter(ids, pc.invert(pc.is_in(ids, value_set=_column(units, "unit_id"))))
    missing = sorted(set(gone.to_pylist()))
    return Gate(
        "group_members_exist_and_are_live",
        not missing,
        "every member of a group is a live unit",
        {"missing_members": len(missing), "first_missing": ", ".join(missing[:5])},
    )


def groups_stay_within_one_tenant(groups: pa.Table, members: pa.Table, units: pa.Table) -> Gate:
    """``units``: the live units (:data:`UNIT_SCOPE_SCHEMA`); a member that is not one of
    them is :func:`group_members_exist_and_are_live`'s to report."""
    pairs = _member_pairs(groups, members, units)
    unit_tenant = pc.take(_column(units, "tenant_id"), pairs.unit)
    group_tenant = pc.take(_column(groups, "tenant_id"), pairs.group)  # null: no such group
    same = pc.or_(
        pc.fill_null(pc.equal(unit_tenant, group_tenant), False),
        pc.and_(pc.is_null(unit_tenant), pc.is_null(group_tenant)),
    )
    bad = sorted(set(pc.filter(pairs.group_ids, pc.invert(same)).to_pylist()))
    return Gate(
        "groups_stay_within_one_tenant",
        not bad,
        "every group's members belong to the group's tenant",
        {"groups_spanning_tenants": len(bad), "first": ", ".join(bad[:5])},
    )


def group_acl_within_members(groups: pa.Table, members: pa.Table, units: pa.Table) -> Gate:
    """``units``: the live units (:data:`UNIT_SCOPE_SCHEMA`); members that are not one of
    them, or of no group, are the other gates' to report."""
    pairs = _member_pairs(groups, members, units)
    known = pc.is_valid(pairs.group)
    pairs = _MemberPairs(*(pc.filter(c, known) for c in pairs))
    group_tier = pc.take(_column(groups, "tier"), pairs.group)
    unit_tier = pc.take(_column(units, "tier"), pairs.unit)
    looser = pc.and_(
        pc.fill_null(pc.equal(unit_tier, "restricted"), False),
        pc.fill_null(pc.not_equal(group_tier, "restricted"), True),
    )
    # each (member row, ACL group of its group) with no such ACL group on the member's unit
    group_acl = pc.take(_column(groups, "acl_groups"), pairs.group)
    unit_acl = pc.take(_column(units, "acl_groups"), pairs.unit)
    wanted = pa.table({"row": pc.list_parent_indices(group_acl), "acl": pc.list_flatten(group_acl)})
    held = pa.table({"row": pc.list_parent_indices(unit_acl), "acl": pc.list_flatten(unit_acl)})
    lacking = wanted.join(held, keys=["row", "acl"], join_type="left anti")["row"]
    wider = pc.take(pairs.group_ids, lacking)
    bad = set(pc.filter(pairs.group_ids, looser).to_pylist()) | set(wider.to_pylist())
    return Gate(
        "group_acl_within_members",
        not bad,
        "each group's ACL groups are within each member's, its tier at least as restrictive",
        {"groups_wider_than_a_member": len(bad), "first": ", ".join(sorted(bad)[:5])},
    )


class _MemberPairs(NamedTuple):
    """The member rows whose unit is live: each one's group id, the row of its group in the
    groups table (null: no such group) and the row of its unit in the units table."""

    group_ids: pa.Array
    group: pa.Array
    unit: pa.Array


def _member_pairs(groups: pa.Table, members: pa.Table, units: pa.Table) -> _MemberPairs:
    member_groups = _column(members, "group_id")
    unit = pc.index_in(_column(members, "unit_id"), value_set=_column(units, "unit_id"))
    group = pc.index_in(member_groups, value_set=_column(groups, "group_id"))
    live = pc.is_valid(unit)
    return _MemberPairs(
        pc.filter(member_groups, live), pc.filter(group, live), pc.filter(unit, live)
    )


def _column(table: pa.Table, name: str) -> pa.Array:
    return table[name].combine_chunks()


def group_rows_have_groups(row_group_ids: Iterable[str], group_ids: Iterable[str]) -> Gate:
    """``row_group_ids``: the ``doc_id`` of every ``kind: group`` row of the collection in a
    generation."""
    known = set(group_ids)
    orphans = sorted({g for g in row_group_ids if g not in known})
    return Gate(
        "group_rows_have_groups",
        not orphans,
        "every group row of a generation names a group linked_groups holds",
        {"orphan_group_rows": len(orphans), "first": ", ".join(orphans[:5])},
    )
