"""The messages sample, its truth file and its golden set agree with each other.

The sample is what the ``messages`` kind, the linked groups and the identity registry are
measured on, so its promises are checked here: every record well formed, every conversation,
question and incident in the truth file real, and every golden group visible to its asker.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_corpus" / "messages"
SOURCES = {
    "discord_chat",
    "sms_message",
    "email_thread",
    "phone_call",
    "incident_report",
    "shift_note",
    "resource_doc",
}
THREADED = {"discord_chat", "sms_message", "email_thread"}


@functools.cache
def collections() -> dict[str, dict[str, Any]]:
    data = yaml.safe_load((SAMPLE / "collections.yaml").read_text())
    by_tenant = {}
    for spec in data["collections"].values():
        by_tenant[spec["tenant"]] = spec
    return by_tenant


TENANTS = sorted(collections())


@functools.cache
def records(tenant: str) -> list[dict[str, Any]]:
    root = ROOT / collections()[tenant]["path"]
    out = []
    for path in sorted(root.glob("*.jsonl")):
        out.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines())
    return out


def by_id(tenant: str) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in records(tenant)}


@functools.cache
def truth(tenant: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((SAMPLE / "truth.yaml").read_text())["tenants"]
    return dict(data[tenant])


def when(rec: dict[str, Any]) -> dt.datetime:
    return dt.datetime.fromisoformat(rec["timestamp"])


def visible_groups(tenant: str, rec: dict[str, Any]) -> set[str]:
    groups = set(collections()[tenant]["acl_groups"])
    return groups & set(rec["acl"]) if "acl" in rec else groups


def test_two_tenants_and_a_few_hundred_records() -> None:
    assert TENANTS == ["bluegum", "wattle"]
    assert sum(len(records(t)) for t in TENANTS) >= 200
    for tenant in TENANTS:
        people = yaml.safe_load((ROOT / collections()[tenant]["path"] / "people.yaml").read_text())
        assert people["tenant"] == tenant


@pytest.mark.parametrize("tenant", TENANTS)
def test_records_are_well_formed(tenant: str) -> None:
    recs = records(tenant)
    assert len({r["id"] for r in recs}) == len(recs)
    assert {r["source"] for r in recs} == SOURCES
    for r in recs:
        assert isinstance(r["text"], str) and r["text"].strip(), r["id"]
        assert isinstance(r["author"], str) and r["author"], r["id"]
        assert isinstance(r["recipients"], list) and isinstance(r["cc"], list), r["id"]
        assert r.get("channel") or r.get("thread"), r["id"]
        assert when(r).utcoffset() is not None, r["id"]
        assert r["location"], r["id"]
        if "acl" in r:  # narrows the collection's groups, never widens them
            assert set(r["acl"]) < set(collections()[tenant]["acl_groups"]), r["id"]


@pytest.mark.parametrize("tenant", TENANTS)
def test_replies_point_back_in_their_own_channel(tenant: str) -> None:
    recs = by_id(tenant)
    replies = [r for r in recs.values() if "reply_to" in r]
    assert replies
    for r in replies:
        parent = recs[r["reply_to"]]
        assert parent["channel"] == r["channel"] and when(parent) < when(r), r["id"]


@pytest.mark.parametrize("tenant", TENANTS)
def test_conversations_partition_the_threaded_units(tenant: str) -> None:
    recs = by_id(tenant)
    members = [m for c in truth(tenant)["conversations"] for m in c["members"]]
    assert Counter(members).most_common(1)[0][1] == 1
    assert set(members) == {i for i, r in recs.items() if r["source"] in THREADED}
    for conv in truth(tenant)["conversations"]:
        where = {recs[m].get("channel") or recs[m].get("thread") for m in conv["members"]}
        assert where == {conv["channel"]}, conv["key"]


def test_the_christmas_thread_has_nine_messages_one_of_them_yes_pumpkin_please() -> None:
    recs = by_id("wattle")
    thread = next(c for c in truth("wattle")["conversations"] if c["key"].endswith("/xmas"))
    texts = [recs[m]["text"] for m in thread["members"]]
    assert len(texts) == 9 and "yes pumpkin please" in texts
    start, end = when(recs[thread["members"][0]]), when(recs[thread["members"][-1]])
    interleaved = [
        r
        for r in recs.values()
        if r.get("channel") == recs[thread["members"][0]]["channel"]
        and start < when(r) < end
        and r["id"] not in thread["members"]
    ]
    assert interleaved  # another conversation runs at the same time in the channel


@pytest.mark.parametrize("tenant", TENANTS)
def test_answers_come_after_their_questions_some_hours_later(tenant: str) -> None:
    recs = by_id(tenant)
    pairs = truth(tenant)["answered_questions"]
    gaps = []
    for pair in pairs:
        asked = when(recs[pair["question"]])
        for answer in pair["answers"]:
            assert when(recs[answer]) > asked, pair["key"]
            gaps.append(when(recs[answer]) - asked)
    assert sum(g >= dt.timedelta(hours=2) for g in gaps) >= 5
    answered = {p["question"] for p in pairs}
    assert truth(tenant)["unanswered_questions"]
    assert answered.isdisjoint(truth(tenant)["unanswered_questions"])


@pytest.mark.parametrize("tenant", TENANTS)
def test_incident_shift_notes_are_at_the_place_within_a_day_some_late(tenant: str) -> None:
    recs = by_id(tenant)
    late = 0
    for incident in truth(tenant)["incidents"]:
        report = recs[incident["incident"]]
        assert report["source"] == "incident_report" and incident["shift_notes"]
        for note_id in incident["shift_notes"]:
            note = recs[note_id]
            assert note["source"] == "shift_note" and note["location"] == report["location"]
            assert abs(when(note) - when(report)) <= dt.timedelta(days=1), note_id
            late += "late entry" in note["title"]
    assert late >= 2


@pytest.mark.parametrize("tenant", TENANTS)
def test_decision_threads_end_at_their_decision_within_one_conversation(tenant: str) -> None:
    recs = by_id(tenant)
    decisions = truth(tenant)["decisions"]
    assert sum(d["status"] == "resolved" for d in decisions) >= 3
    for d in decisions:
        members = [recs[m] for m in d["members"]]
        assert members == sorted(members, key=when), d["key"]
        assert len({m["author"] for m in members}) >= 2, d["key"]
        if d["status"] == "resolved":
            assert d["decision"] == d["members"][-1] and d["decided_by"] in people(tenant)
        else:
            assert d["status"] == "open" and d["decision"] is None and d["decided_by"] is None
        assert len({m.get("channel") or m.get("thread") for m in members}) == 1, d["key"]


def test_one_decision_is_still_open() -> None:
    assert [d["key"] for t in TENANTS for d in truth(t)["decisions"] if d["status"] == "open"] == [
        "van-calendar"
    ]


@functools.cache
def golden() -> list[dict[str, Any]]:
    return list(yaml.safe_load((ROOT / "golden" / "messages.yaml").read_text())["queries"])


@functools.cache
def people(tenant: str) -> set[str]:
    data = yaml.safe_load((ROOT / collections()[tenant]["path"] / "people.yaml").read_text())
    return {p["id"] for p in data["people"]}


def test_golden_set_covers_each_kind_of_query() -> None:
    queries = golden()
    assert len(queries) >= 30
    assert len({q["id"] for q in queries}) == len(queries)
    assert {q["covers"] for q in queries} == {
        "conversation",
        "question",
        "incident",
        "person",
        "acl",
        "decision",
    }
    assert {q["tenant"] for q in queries} == set(TENANTS)


def _truth_group(tenant: str, kind: str, key: str) -> list[str]:
    t = truth(tenant)
    if kind == "conversation":
        return next(c["members"] for c in t["conversations"] if c["key"] == key)
    if kind == "decision_thread":
        return next(d["members"] for d in t["decisions"] if d["key"] == key)
    if kind == "qa_pair":
        pair = next(p for p in t["answered_questions"] if p["key"] == key)
        return [pair["question"], *pair["answers"]]
    incident = next(i for i in t["incidents"] if i["key"] == key)
    return [incident["incident"], *incident["shift_notes"]]


def test_golden_groups_are_truth_groups_visible_to_the_asker() -> None:
    for q in golden():
        recs = by_id(q["tenant"])
        for group in [q["first"], *q["relevant"]]:
            assert group["members"] == _truth_group(q["tenant"], group["type"], group["truth"])
            for member in group["members"]:
                assert visible_groups(q["tenant"], recs[member]) & set(q["groups"]), (
                    q["id"],
                    member,
                )
        if "person" in q:
            assert q["person"] in people(q["tenant"])


def test_the_acl_query_cannot_see_the_incident_it_is_about() -> None:
    recs = by_id("wattle")
    (q,) = [q for q in golden() if q["covers"] == "acl"]
    hidden = next(i for i in truth("wattle")["incidents"] if i["key"] == "seizure")
    assert not visible_groups("wattle", recs[hidden["incident"]]) & set(q["groups"])
