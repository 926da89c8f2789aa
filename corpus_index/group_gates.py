"""Blocking checks on a collection's linked groups (DESIGN §10b), as plain functions.

Each takes the ``linked_groups`` tables (groups: GROUP_SCHEMA, members: MEMBER_SCHEMA) and
what they are checked against, and returns a :class:`~corpus_index.gates.Gate`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pyarrow as pa

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


def group_members_exist_and_are_live(members: pa.Table, live_units: Iterable[str]) -> Gate:
    live = set(live_units)
    missing = sorted({u for u in members["unit_id"].to_pylist() if u not in live})
    return Gate(
        "group_members_exist_and_are_live",
        not missing,
        "every member of a group is a live unit",
        {"missing_members": len(missing), "first_missing": ", ".join(missing[:5])},
    )


def groups_stay_within_one_tenant(
    groups: pa.Table, members: pa.Table, unit_tenants: Mapping[str, str]
) -> Gate:
    tenant_of = dict(
        zip(groups["group_id"].to_pylist(), groups["tenant_id"].to_pylist(), strict=True)
    )
    bad = sorted(
        {
            g
            for g, u in zip(
                members["group_id"].to_pylist(), members["unit_id"].to_pylist(), strict=True
            )
            if u in unit_tenants and unit_tenants[u] != tenant_of.get(g)
        }
    )
    return Gate(
        "groups_stay_within_one_tenant",
        not bad,
        "every group's members belong to the group's tenant",
        {"groups_spanning_tenants": len(bad), "first": ", ".join(bad[:5])},
    )


def group_acl_within_members(
    groups: pa.Table,
    members: pa.Table,
    unit_scopes: Mapping[str, tuple[tuple[str, ...], str]],
) -> Gate:
    """``unit_scopes``: unit_id -> (acl_groups, tier)."""
    scope_of = {
        r["group_id"]: (set(r["acl_groups"] or ()), r["tier"])
        for r in groups.select(["group_id", "acl_groups", "tier"]).to_pylist()
    }
    bad: set[str] = set()
    for g, u in zip(members["group_id"].to_pylist(), members["unit_id"].to_pylist(), strict=True):
        if u not in unit_scopes or g not in scope_of:
            continue
        acl, tier = scope_of[g]
        unit_acl, unit_tier = unit_scopes[u]
        if not acl <= set(unit_acl) or (unit_tier == "restricted" and tier != "restricted"):
            bad.add(g)
    return Gate(
        "group_acl_within_members",
        not bad,
        "each group's ACL groups are within each member's, its tier at least as restrictive",
        {"groups_wider_than_a_member": len(bad), "first": ", ".join(sorted(bad)[:5])},
    )


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
