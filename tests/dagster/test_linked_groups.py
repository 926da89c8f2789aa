"""The sample messages collections through the real graph: their units are linked into groups,
the groups are rows of the generation (``kind: group``) beside their units, scoped like them,
and a deleted unit leaves its groups in every generation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pytest
import yaml

from corpus_index.config import Settings
from corpus_index.eligibility import Principal, eligibility
from corpus_index.group_records import GROUP_SCHEMA, MEMBER_SCHEMA
from corpus_index.home import Home
from tests.dagster.harness import Graph, check_outcomes, metadata

SAMPLE = Path(__file__).resolve().parents[2] / "sample_corpus" / "messages"
# the Christmas meal-planning thread of truth.yaml ('#picton-sil/xmas')
CHRISTMAS = {f"wg-dc-0{n}" for n in (22, 23, 24, 25, 27, 28, 30, 31, 32)}
PUMPKIN = "wg-dc-028"  # "yes pumpkin please"


def _config(root: Path, *, deals: bool = False) -> Settings:
    """Both tenants' sample streams (copied, so a test may delete a record), one hash profile."""
    shutil.copytree(SAMPLE / "wattle", root / "wattle")
    shutil.copytree(SAMPLE / "bluegum", root / "bluegum")
    common = {"kind": "messages", "tier": "restricted", "namespace": "messages"}
    collections = {
        "wattle-messages": {
            **common,
            "path": "wattle",
            "tenant": "wattle",
            "acl_groups": ["wattle-staff", "wattle-managers"],
            "people": "people.yaml",
        },
        "bluegum-messages": {
            **common,
            "path": "bluegum",
            "tenant": "bluegum",
            "acl_groups": ["bluegum-staff", "bluegum-coordinators"],
            "people": "people.yaml",
        },
    }
    config = root / "corpus.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "collections": collections,
                "profiles": {"hash": {"embedder": "hash:v1-64", "namespace": "messages"}},
                "namespaces": {"messages": {"eval_gate": "off"}},
            }
        )
    )
    return Settings(config_path=config, home=root / "home")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Graph:
    g = Graph(_config(tmp_path_factory.mktemp("linked")))
    g.build_all()
    return g


def _groups(home: Home, collection: str) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    groups = home.read("linked_groups", (collection,), GROUP_SCHEMA).to_pylist()
    members = home.read("group_members", (collection,), MEMBER_SCHEMA).to_pylist()
    return groups, members


def _group_rows(home: Home, where: str | None = None) -> list[dict[str, object]]:
    gen = home.registry.live_generation("hash")
    assert gen is not None
    query = home.store.table(gen).search()
    if where:
        query = query.where(where, prefilter=True)
    rows: list[dict[str, object]] = query.limit(100_000).to_list()
    return [r for r in rows if r["kind"] == "group"]


def test_groups_are_written_and_indexed_beside_their_units(built: Graph) -> None:
    home = Home(built.settings)
    r = built.materialize(["linked_groups"], "wattle-messages")
    assert r.success and all(check_outcomes(r).values())
    assert set(check_outcomes(r)) == {
        "group_members_exist_and_are_live",
        "groups_stay_within_one_tenant",
        "group_acl_within_members",
    }
    md = metadata(r, "linked_groups")
    groups, members = _groups(home, "wattle-messages")
    assert md["groups"] == len(groups) > 10 and md["members"] == len(members)
    # "yes pumpkin please" is in one conversation, of the Christmas meal thread only
    christmas = _conversation_of(groups, members, PUMPKIN)
    gid = christmas["group_id"]
    mine = {m["unit_id"] for m in members if m["group_id"] == gid}
    assert PUMPKIN in mine and mine <= CHRISTMAS
    # a group's scope is its members': one tenant, the intersection of their ACL groups
    assert {g["tenant_id"] for g in groups} == {"wattle"}
    assert christmas["acl_groups"] == ["wattle-managers", "wattle-staff"]
    # ... and it is a row of the generation, marked kind=group, under group-v1
    rows = {r["doc_id"]: r for r in _group_rows(home)}
    assert gid in rows
    row = rows[gid]
    assert row["input_format"] == "group-v1" and row["source_type"] == "conversation"
    assert "yes pumpkin please" in str(row["text"]) and "dates: 2025-12-" in str(row["text"])
    assert json.loads(str(row["metadata"]))["member_count"] == len(mine)
    indexed = {g["group_id"] for g in groups if g["acl_groups"]}
    tenants = {str(r["doc_id"]): r["tenant_id"] for r in rows.values()}
    assert indexed <= set(tenants)
    assert {tenants[g] for g in indexed} == {"wattle"}


def _conversation_of(
    groups: list[dict[str, object]], members: list[dict[str, object]], unit: str
) -> dict[str, object]:
    with_unit = {m["group_id"] for m in members if m["unit_id"] == unit}
    found = [g for g in groups if g["group_id"] in with_unit and g["group_type"] == "conversation"]
    assert len(found) == 1
    return found[0]


@pytest.mark.xfail(
    strict=True,
    reason="the conversation linker (corpus_index/linked) splits the nine-message thread "
    "into three conversations today; this passes once it keeps the thread whole",
)
def test_the_christmas_thread_is_one_conversation(built: Graph) -> None:
    groups, members = _groups(Home(built.settings), "wattle-messages")
    gid = _conversation_of(groups, members, PUMPKIN)["group_id"]
    assert {m["unit_id"] for m in members if m["group_id"] == gid} == CHRISTMAS


def test_a_group_is_hidden_from_whoever_may_not_see_a_member(built: Graph) -> None:
    home = Home(built.settings)
    groups, members = _groups(home, "wattle-messages")
    narrowed = {
        g["group_id"] for g in groups if g["acl_groups"] == ["wattle-managers"]
    }  # a member narrowed to managers makes its group managers-only
    assert narrowed
    staff = Principal("wattle", ("wattle-staff",))
    managers = Principal("wattle", ("wattle-managers",))
    collections = ["wattle-messages", "bluegum-messages"]
    seen_by_staff = {r["doc_id"] for r in _group_rows(home, eligibility(staff, collections))}
    seen_by_managers = {r["doc_id"] for r in _group_rows(home, eligibility(managers, collections))}
    assert narrowed <= seen_by_managers
    assert not narrowed & seen_by_staff
    assert seen_by_staff  # the rest of the groups are theirs to see
    other = Principal("bluegum", ("wattle-staff", "wattle-managers"))
    assert not {r["doc_id"] for r in _group_rows(home, eligibility(other, collections))} & (
        seen_by_managers
    )


def test_generation_rows_reconcile_with_unit_and_group_inputs(built: Graph) -> None:
    r = built.generation("hash")
    checks = check_outcomes(r)
    assert r.success and checks["row_counts_reconcile"] and checks["no_orphan_vectors"]
    home = Home(built.settings)
    inputs = home.read("embedding_inputs", ("wattle-messages",))
    groups = inputs.filter(pc.equal(inputs["input_format"], "group-v1"))
    assert groups.num_rows == len(
        [g for g in _groups(home, "wattle-messages")[0] if g["acl_groups"]]
    )
