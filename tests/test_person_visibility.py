"""A person is found, and shown, only by what the principal may know of them: the names,
addresses and numbers the tenant's people file lists or a unit the principal may see shows.
A managers-only e-mail gives an outside coordinator a private address and merges a stranger
into Sarah Jones, another brings a second Anand; staff learn none of it from a person query or
a group search."""

from __future__ import annotations

import datetime as dt
import json
import shutil

import pytest
import yaml

from corpus_index.config import Settings
from corpus_index.group_search import search_contexts
from corpus_index.person_search import person_contexts
from corpus_index.query_analysis import Person
from corpus_index.search import Principal, Searcher
from corpus_index.visible_people import Directory, shown
from tests.searchkit import ROOT, build_home, messages_config

AS_OF = dt.datetime(2026, 1, 10, tzinfo=dt.UTC)
MANAGER = Principal("wattle", ("wattle-staff", "wattle-managers"))
STAFF = Principal("wattle", ("wattle-staff",))
HIDDEN = [
    {
        "id": "wg-hid-001",
        "source": "email_thread",
        "thread": "private-kate",
        "subject": "A private matter",
        "author": "Kate Morrison <xq77@hidden.example>",
        "recipients": ["sarah.jones@wattlegrove.org.au"],
        "timestamp": "2026-01-08T10:00:00+11:00",
        "location": "Head office",
        "text": "Please use this address for the private matter we discussed.",
        "acl": ["wattle-managers"],
    },
    {
        "id": "wg-hid-002",
        "source": "email_thread",
        "thread": "private-zed",
        "subject": "Roster",
        "author": "Zed Quigley <zed@quig.example>",
        "recipients": ["sarah.jones@wattlegrove.org.au"],
        "timestamp": "2026-01-08T11:00:00+11:00",
        "location": "Head office",
        "text": "Writing from my other account about the roster.",
        "acl": ["wattle-managers"],
    },
    {
        "id": "wg-hid-003",
        "source": "email_thread",
        "thread": "private-pat",
        "subject": "Introduction",
        "author": "Pat Xu <pat@xu.example>",
        "recipients": ["sarah.jones@wattlegrove.org.au"],
        "timestamp": "2026-01-08T09:00:00+11:00",
        "location": "Head office",
        "text": "Introducing myself before the audit.",
        "acl": ["wattle-managers"],
    },
    {  # shares a given name with Dr Anand Shah, whom staff may see
        "id": "wg-hid-006",
        "source": "email_thread",
        "thread": "private-anand",
        "subject": "Private",
        "author": "Anand Patel <anand.patel@hidden.example>",
        "recipients": ["sarah.jones@wattlegrove.org.au"],
        "timestamp": "2026-01-08T12:00:00+11:00",
        "location": "Head office",
        "text": "A personnel matter, for managers only.",
        "acl": ["wattle-managers"],
    },
    {  # staff see this one: its author goes by the address alone
        "id": "wg-vis-004",
        "source": "email_thread",
        "thread": "audit-dates",
        "subject": "Audit dates",
        "author": "pat@xu.example",
        "recipients": ["sarah.jones@wattlegrove.org.au"],
        "timestamp": "2026-01-09T09:00:00+11:00",
        "location": "Head office",
        "text": "The audit is booked for the 20th of January.",
    },
    {
        "id": "wg-vis-005",
        "source": "email_thread",
        "thread": "audit-dates",
        "subject": "RE: Audit dates",
        "author": "Sarah Jones <sarah.jones@wattlegrove.org.au>",
        "recipients": ["pat@xu.example"],
        "timestamp": "2026-01-09T11:00:00+11:00",
        "location": "Head office",
        "text": "Thanks, the 20th of January works for the audit.",
        "reply_to": "wg-vis-004",
    },
]


@pytest.fixture(scope="module")
def searcher(tmp_path_factory: pytest.TempPathFactory) -> Searcher:
    root = tmp_path_factory.mktemp("visibility")
    config_path = messages_config(root)
    config = yaml.safe_load(config_path.read_text())
    wattle = root / "wattle"
    shutil.copytree(ROOT / "sample_corpus" / "messages" / "wattle", wattle)
    lines = "".join(json.dumps(r) + "\n" for r in HIDDEN)
    (wattle / "private.jsonl").write_text(lines, encoding="utf-8")
    (wattle / "merges.yaml").write_text(
        "merges:\n  - {merge: 'discovered:zed@quig.example', into: sarah-jones}\n"
    )
    config["collections"] = {"wattle-messages": config["collections"]["wattle-messages"]}
    config["collections"]["wattle-messages"].update(path=str(wattle), merges="merges.yaml")
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    return Searcher(build_home(Settings(config_path=config_path, home=root / "home")))


def test_an_address_only_a_hidden_unit_shows_finds_no_one(searcher: Searcher) -> None:
    seen = person_contexts(searcher, "xq77@hidden.example", principal=MANAGER)
    assert seen.person is not None and seen.person.name == "Kate Morrison"
    hidden = person_contexts(searcher, "xq77@hidden.example", principal=STAFF)
    assert (hidden.person, hidden.candidates, hidden.records) == (None, [], [])
    # the address a unit staff see shows still finds her
    known = person_contexts(
        searcher, "kate.morrison@brightpath-coordination.example", principal=STAFF
    )
    assert known.person is not None and known.person.name == "Kate Morrison"


def test_a_name_merged_in_from_a_hidden_unit_is_no_alias_to_staff(searcher: Searcher) -> None:
    seen = person_contexts(searcher, "Zed Quigley", principal=MANAGER)
    assert seen.person is not None and seen.person.name == "Sarah Jones"
    assert "Zed Quigley" in seen.to_json()["person"]["aliases"]
    for query in ("Zed Quigley", "zed@quig.example"):
        hidden = person_contexts(searcher, query, principal=STAFF)
        assert (hidden.person, hidden.candidates) == (None, []), query
    sarah = person_contexts(searcher, "Sarah Jones", principal=STAFF).to_json()["person"]
    assert sarah["name"] == "Sarah Jones" and "Zed Quigley" not in sarah["aliases"]
    assert {"Sarah", "SJ"} <= set(sarah["aliases"])  # the people file's, for the tenant


def test_a_group_search_names_no_one_by_a_hidden_name(searcher: Searcher) -> None:
    query = "what did Zed Quigley say about the roster"
    staff = search_contexts(searcher, query, principal=STAFF, as_of=AS_OF)
    assert staff.analysis.people == ()
    manager = search_contexts(searcher, query, principal=MANAGER, as_of=AS_OF)
    assert [p.name for p in manager.analysis.people] == ["Sarah Jones"]


def test_a_participant_goes_by_what_the_visible_units_show(searcher: Searcher) -> None:
    def names(principal: Principal) -> set[str]:
        found = person_contexts(searcher, "pat@xu.example", principal=principal)
        assert found.person is not None
        people = {p.name for r in found.records for p in r.participants}
        return people | {found.person.name}

    assert "Pat Xu" in names(MANAGER)
    staff = names(STAFF)
    assert "Pat Xu" not in staff and "pat@xu.example" in staff


def test_a_visible_groups_text_names_no_one_by_a_hidden_name(searcher: Searcher) -> None:
    """A group's text (embedded, searchable) names a person the people file does not list as
    its own members write them, not by a name the registry took from a managers-only unit."""
    groups = searcher.corpus.read("linked_groups", ("wattle-messages",)).to_pylist()
    members = searcher.corpus.read("group_members", ("wattle-messages",)).to_pylist()
    theirs = {m["group_id"] for m in members if m["unit_id"] == "wg-vis-004"}
    texts = [g["input_text"] for g in groups if g["group_id"] in theirs]
    assert texts and all("Pat Xu" not in t and "pat@xu.example" in t for t in texts)
    assert any("Sarah Jones" in t for t in texts)  # the people file's name, as before


def test_a_name_a_hidden_person_shares_still_names_the_visible_one(searcher: Searcher) -> None:
    """Anand Patel, whom only a managers-only e-mail mentions, would make "Anand" name no one
    (two people by that given name): staff, who may not know of him, still find Dr Anand Shah
    by it, in a person query and in a group search's analysis."""
    staff = person_contexts(searcher, "Anand", principal=STAFF)
    assert staff.person is not None and staff.person.name == "Anand Shah"
    query = "what did Anand say about the Epilim dose"
    analysis = search_contexts(searcher, query, principal=STAFF, as_of=AS_OF).analysis
    assert [p.name for p in analysis.people] == ["Anand Shah"]
    # managers know of both: the given name alone names neither, and offers both
    manager = person_contexts(searcher, "Anand", principal=MANAGER)
    assert manager.person is None
    assert sorted(c.name for c in manager.candidates) == ["Anand Patel", "Anand Shah"]
    assert person_contexts(searcher, "Anand Patel", principal=MANAGER).person is not None
    analysis = search_contexts(searcher, query, principal=MANAGER, as_of=AS_OF).analysis
    assert analysis.people == ()


@pytest.mark.parametrize(
    ("snippet", "is_shown"),
    [
        ("From: joann@wattle.org", False),  # a longer local part
        ("From: jo.ann@wattle.org", False),
        ("From: ann@wattle.org.au", False),  # a longer domain
        ("From: ann@wattle.organics.example", False),
        ("From: A. Lee <ann@wattle.org>", True),
        ("Write to ANN@Wattle.org.", True),  # a sentence's full stop ends it
        ("ann@wattle.org, pat@xu.example", True),
    ],
)
def test_an_address_is_shown_only_whole(snippet: str, is_shown: bool) -> None:
    """An address a visible unit shows only inside a longer one (a hidden unit's address
    ann@wattle.org in a visible joann@wattle.org) does not find or name its person."""
    got = shown(Person("idn_1", "Ann Lee"), ["ann@wattle.org"], [], [snippet], Directory())
    assert ("ann@wattle.org" in got.emails) is is_shown
