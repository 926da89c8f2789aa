"""Linked groups as tables: tenancy, ACL intersection, tier, content ids, the ``group-v1`` input
and its cut; and the blocking checks on them, each shown passing and failing."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _live(**units: tuple[str, tuple[str, ...], str]) -> pa.Table:
    """Live units as the gates take them: unit id -> (tenant, ACL groups, tier)."""
    return group_gates.unit_scopes((u, t, acl, tier) for u, (t, acl, tier) in units.items())


def test_members_must_exist_and_be_live() -> None:
    live = _live(a1=("alpha", (), "restricted"), a2=("alpha", (), "restricted"))
    assert group_gates.group_members_exist_and_are_live(_members("a1", "a2"), live).passed
    gate = group_gates.group_members_exist_and_are_live(_members("a1", "gone"), live)
    assert not gate.passed and gate.metadata["first_missing"] == "gone"


def test_a_group_may_not_span_tenants() -> None:
    live = _live(
        a1=("alpha", (), "restricted"), a2=("alpha", (), "restricted"), b1=("beta", (), "public")
    )
    assert group_gates.groups_stay_within_one_tenant(GROUPS, _members("a1", "a2"), live).passed
    gate = group_gates.groups_stay_within_one_tenant(GROUPS, _members("a1", "b1"), live)
    assert not gate.passed and gate.metadata["groups_spanning_tenants"] == 1
    assert gate.metadata["first"] == "g1"


def test_a_group_acl_must_be_within_each_member() -> None:
    live = _live(
        a1=("alpha", ("staff", "leads"), "restricted"), a2=("alpha", ("leads",), "restricted")
    )
    members = _members("a1", "a2")
    assert group_gates.group_acl_within_members(GROUPS, members, live).passed
    wider = GROUPS.set_column(2, "acl_groups", pa.array([["leads", "staff"]]))
    gate = group_gates.group_acl_within_members(wider, members, live)
    assert not gate.passed and gate.metadata["first"] == "g1"
    public = GROUPS.set_column(3, "tier", pa.array(["public"]))
    assert not group_gates.group_acl_within_members(public, members, live).passed


# the gates' definitions, one member row at a time: the checks above, over every row
def _spanning(
    groups: pa.Table, members: pa.Table, live: dict[str, tuple[str, tuple[str, ...], str]]
) -> set[str]:
    tenant_of = dict(
        zip(groups["group_id"].to_pylist(), groups["tenant_id"].to_pylist(), strict=True)
    )
    return {
        g for g, u in zip(members["group_id"].to_pylist(), members["unit_id"].to_pylist(), strict=True)
        if u in live and live[u][0] != tenant_of.get(g)
    }  # fmt: skip


def _wider(
    groups: pa.Table, members: pa.Table, live: dict[str, tuple[str, tuple[str, ...], str]]
) -> set[str]:
    scope_of = {r["group_id"]: (set(r["acl_groups"] or ()), r["tier"]) for r in groups.to_pylist()}
    return {
        g for g, u in zip(members["group_id"].to_pylist(), members["unit_id"].to_pylist(), strict=True)
        if u in live and g in scope_of and (
            not scope_of[g][0] <= set(live[u][1])
            or (live[u][2] == "restricted" and scope_of[g][1] != "restricted")
        )
    }  # fmt: skip


_TIERS = st.sampled_from(["public", "internal", "restricted"])
_ACL = st.lists(st.sampled_from(["staff", "leads", "nurses", "admin"]), unique=True, max_size=3)


@settings(max_examples=150, deadline=None)
@given(
    groups=st.dictionaries(
        st.sampled_from(["g1", "g2", "g3", "g4"]),
        st.tuples(st.sampled_from(["alpha", "beta"]), st.one_of(st.none(), _ACL), _TIERS),
    ),
    live=st.dictionaries(
        st.sampled_from(["u1", "u2", "u3", "u4", "u5"]),
        st.tuples(st.sampled_from(["alpha", "beta"]), _ACL.map(tuple), _TIERS),
    ),
    rows=st.lists(
        st.tuples(st.sampled_from(["g1", "g2", "g3", "g4", "g9"]), st.sampled_from(["u1", "u2", "u3", "u4", "u5", "gone"])),
        max_size=20,
    ),
)  # fmt: skip
def test_the_gates_flag_exactly_the_groups_their_definition_does(
    groups: dict[str, tuple[str, list[str] | None, str]],
    live: dict[str, tuple[str, tuple[str, ...], str]],
    rows: list[tuple[str, str]],
) -> None:
    group_table = pa.table(
        {
            "group_id": list(groups),
            "tenant_id": [t for t, _, _ in groups.values()],
            "acl_groups": [a for _, a, _ in groups.values()],
            "tier": [tier for _, _, tier in groups.values()],
        },
        schema=GROUPS.schema.set(2, pa.field("acl_groups", pa.list_(pa.string()))),
    )
    members = pa.Table.from_pylist(
        [
            {"group_id": g, "collection": "care", "tenant_id": "alpha", "unit_id": u, "order": k + 1,
             "role": "response", "primary": False, "relevance": 1.0}
            for k, (g, u) in enumerate(rows)
        ],
        MEMBER_SCHEMA,
    )  # fmt: skip
    scopes = _live(**live)
    missing = group_gates.group_members_exist_and_are_live(members, scopes)
    gone = sorted({u for _, u in rows if u not in live})
    assert missing.passed == (not gone) and missing.metadata["missing_members"] == len(gone)
    assert missing.metadata["first_missing"] == ", ".join(gone[:5])
    spanning = group_gates.groups_stay_within_one_tenant(group_table, members, scopes)
    expected = sorted(_spanning(group_table, members, live))
    assert spanning.passed == (not expected)
    assert spanning.metadata["first"] == ", ".join(expected[:5])
    wider = group_gates.group_acl_within_members(group_table, members, scopes)
    expected = sorted(_wider(group_table, members, live))
    assert wider.passed == (not expected)
    assert wider.metadata["groups_wider_than_a_member"] == len(expected)
    assert wider.metadata["first"] == ", ".join(expected[:5])


def test_no_group_row_without_a_group() -> None:
    assert group_gates.group_rows_have_groups(["g1"], ["g1", "g2"]).passed
    gate = group_gates.group_rows_have_groups(["g1", "g9"], ["g1"])
    assert not gate.passed and gate.metadata["first"] == "g9"
