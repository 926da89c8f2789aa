"""Linked groups as tables: tenancy, ACL intersection, tier, content ids, the ``group-v1`` input
and its cut; and the blocking checks on them, each shown passing and failing."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pytest

from corpus_index import group_gates
from corpus_index.group_records import (
    GROUP_INPUT_FORMAT,
    MEMBER_SCHEMA,
    Unit,
    group_blocks,
    group_inputs,
    group_tables,
    most_restrictive,
)
from corpus_index.linked.groups import Group, Member, group_id
from corpus_index.linked.messages import Message


def _unit(
    uid: str, tenant: str, acl: tuple[str, ...], tier: str = "restricted", t: int = 0
) -> Unit:
    msg = Message(
        uid, "staff", f"author-{uid}", f"text of {uid}", 1_765_000_000.0 + t, location="Picton"
    )
    return Unit(msg, tenant, acl, tier, uid)


def _pairs(messages: Sequence[Message]) -> list[Group]:
    """A stand-in grouping: every two messages in order are a conversation (tenancy is the
    tables' business, not the grouping's)."""
    ordered = sorted(messages, key=lambda m: m.unit_id)
    return [
        Group("conversation", "chat", tuple(Member(m.unit_id, k + 1) for k, m in enumerate(pair)))
        for pair in (ordered[i : i + 2] for i in range(0, len(ordered) - 1, 2))
    ]


UNITS = [
    _unit("a1", "alpha", ("staff", "leads")),
    _unit("a2", "alpha", ("leads",), t=60),
    _unit("b1", "beta", ("b-staff",), "public"),
    _unit("b2", "beta", ("b-staff", "b-leads"), "public", t=60),
    _unit("a3", "alpha", ("staff",), t=120),
    _unit("a4", "alpha", ("leads",), t=180),
]


def test_groups_take_their_members_tenant_acl_intersection_and_tier() -> None:
    tables = group_tables("care", UNITS, _pairs)
    ids: dict[str, list[str]] = {}
    for m in tables.members.to_pylist():
        ids.setdefault(m["group_id"], []).append(m["unit_id"])
    groups = {tuple(ids[r["group_id"]]): r for r in tables.groups.to_pylist()}
    # grouped one tenant at a time: never a1 with b1, whatever the grouping would do
    a = groups[("a1", "a2")]
    assert a["tenant_id"] == "alpha" and a["acl_groups"] == ["leads"] and a["tier"] == "restricted"
    assert a["group_id"] == group_id("alpha", "care", "conversation", ["a2", "a1"])
    b = groups[("b1", "b2")]
    assert b["tenant_id"] == "beta" and b["acl_groups"] == ["b-staff"] and b["tier"] == "public"
    # members share no ACL group: kept, never indexed
    c = groups[("a3", "a4")]
    assert c["acl_groups"] == []
    assert c["group_id"] not in group_inputs(tables.groups)["doc_id"].to_pylist()
    assert len(group_blocks(tables.groups)) == 2
    assert set(group_inputs(tables.groups)["input_format"].to_pylist()) == {GROUP_INPUT_FORMAT}
    members = tables.members.to_pylist()
    assert {(m["group_id"], m["unit_id"]) for m in members if m["unit_id"] == "a1"} == {
        (a["group_id"], "a1")
    }
    assert all(m["tenant_id"] == "alpha" for m in members if m["unit_id"].startswith("a"))


def test_group_ids_come_from_content_not_order() -> None:
    once = group_tables("care", UNITS, _pairs).groups["group_id"].to_pylist()
    again = group_tables("care", list(reversed(UNITS)), _pairs).groups["group_id"].to_pylist()
    assert once == again


@pytest.mark.parametrize(
    ("tiers", "expected"),
    [(["public"], "public"), (["public", "restricted"], "restricted"), ([], "public")],
)
def test_most_restrictive_tier(tiers: list[str], expected: str) -> None:
    assert most_restrictive(tiers) == expected


GROUPS = pa.table(
    {
        "group_id": ["g1"],
        "tenant_id": ["alpha"],
        "acl_groups": [["leads"]],
        "tier": ["restricted"],
    }
)


def _members(*units: str) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"group_id": "g1", "collection": "care", "tenant_id": "alpha", "unit_id": u, "order": k + 1,
             "role": "response", "primary": False, "relevance": 1.0}
            for k, u in enumerate(units)
        ],
        MEMBER_SCHEMA,
    )  # fmt: skip


def test_members_must_exist_and_be_live() -> None:
    assert group_gates.group_members_exist_and_are_live(_members("a1", "a2"), {"a1", "a2"}).passed
    gate = group_gates.group_members_exist_and_are_live(_members("a1", "gone"), {"a1"})
    assert not gate.passed and gate.metadata["first_missing"] == "gone"


def test_a_group_may_not_span_tenants() -> None:
    tenants = {"a1": "alpha", "a2": "alpha", "b1": "beta"}
    assert group_gates.groups_stay_within_one_tenant(GROUPS, _members("a1", "a2"), tenants).passed
    gate = group_gates.groups_stay_within_one_tenant(GROUPS, _members("a1", "b1"), tenants)
    assert not gate.passed and gate.metadata["groups_spanning_tenants"] == 1


def test_a_group_acl_must_be_within_each_member() -> None:
    scopes = {"a1": (("staff", "leads"), "restricted"), "a2": (("leads",), "restricted")}
    members = _members("a1", "a2")
    assert group_gates.group_acl_within_members(GROUPS, members, scopes).passed
    wider = GROUPS.set_column(2, "acl_groups", pa.array([["leads", "staff"]]))
    assert not group_gates.group_acl_within_members(wider, members, scopes).passed
    public = GROUPS.set_column(3, "tier", pa.array(["public"]))
    assert not group_gates.group_acl_within_members(public, members, scopes).passed


def test_no_group_row_without_a_group() -> None:
    assert group_gates.group_rows_have_groups(["g1"], ["g1", "g2"]).passed
    gate = group_gates.group_rows_have_groups(["g1", "g9"], ["g1"])
    assert not gate.passed and gate.metadata["first"] == "g9"
