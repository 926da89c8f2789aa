"""Group-first search and person queries over the messages sample (both tenants), built once
for the module with the hash embedder: whole contexts with members in order, participants and
provenance; ACL and tenancy held for every member; units below fewer than three groups."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa
import pytest
import yaml
from click.testing import CliRunner

from corpus_index import predicates
from corpus_index.api import CorpusIndex
from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.context_records import (
    ROW_COLUMNS,
    MemberRecord,
    People,
    expand_groups,
    read_groups,
    read_rows,
    unit_of,
    unit_rows,
)
from corpus_index.eligibility import eligibility
from corpus_index.errors import InvalidQueryError
from corpus_index.filters import Condition, FilterSpec, parse_expressions
from corpus_index.group_search import ContextRecord, asks_decision, collapse, search_contexts
from corpus_index.home import Home
from corpus_index.person_search import person_contexts
from corpus_index.query_analysis import analyze
from corpus_index.retrieval import MAX_K
from corpus_index.search import Principal, Searcher
from tests.searchkit import active, all_rows, build_home, messages_config

AS_OF = dt.datetime(2026, 1, 10, tzinfo=dt.UTC)
MANAGER = Principal("wattle", ("wattle-staff", "wattle-managers"))
STAFF = Principal("wattle", ("wattle-staff",))
BLUEGUM = Principal("bluegum", ("bluegum-staff", "bluegum-coordinators"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Home:
    root = tmp_path_factory.mktemp("messages")
    return build_home(Settings(config_path=messages_config(root), home=root / "home"))


@pytest.fixture(scope="module")
def searcher(corpus: Home) -> Searcher:
    return Searcher(corpus)


def unit_ids(records: list[ContextRecord]) -> set[str]:
    return {m.unit_id for r in records for m in r.members}


def test_an_incident_comes_back_whole_with_its_shift_notes_people_and_provenance(
    searcher: Searcher,
) -> None:
    found = search_contexts(
        searcher, "John had a seizure in the lounge room", principal=MANAGER, as_of=AS_OF
    )
    top = found.records[0]
    assert top.type == "incident_context" and top.rank == 1
    # the report, its shift notes, then the chat, calls and SMS about John that day
    members = [m.unit_id for m in top.members]
    assert members[:4] == ["wg-ir-001", "wg-sn-001", "wg-sn-002", "wg-sn-003"]
    assert set(members[4:]) == {
        "wg-dc-015",
        "wg-dc-018",
        "wg-call-001",
        "wg-sms-001",
        "wg-call-002",
    }
    assert [m.order for m in top.members] == sorted(m.order for m in top.members)
    assert all(m.text and m.chunk_refs for m in top.members)
    names = {p.name: p.roles for p in top.participants}
    assert "witness" in names["Mike Brennan"] and "subject" in names.get("John Pereira", ())
    assert top.location == "Picton SIL" and top.date == "2025-12-04"
    assert top.provenance["group_id"] == top.id and top.provenance["generation"] == "g0001"
    assert [p.name for p in found.analysis.people] == ["John Pereira"]
    data = json.loads(json.dumps(found.to_json()))
    assert data["total_hits"] == len(found.records)
    assert data["results"]["incidents"][0]["members"][0]["unit_id"] == "wg-ir-001"
    assert data["analysis"]["people"][0]["name"] == "John Pereira"


def test_every_record_carries_its_rows_source_version(corpus: Home, searcher: Searcher) -> None:
    """A group's record and a unit's carry the source version of the row they stand for (as a
    unit search's hit does), beside its chunk_ref and content_hash."""
    version = {r["chunk_ref"]: r["source_version"] for r in all_rows(corpus, "messages")}
    for units in (False, True):
        found = search_contexts(searcher, "roster", principal=MANAGER, units=units, as_of=AS_OF)
        assert found.records and any(r.is_group for r in found.records) is not units
        for r in found.to_json()["results"].values():
            for rec in r:
                prov = rec["provenance"]
                assert prov["source_version"] == version[prov["chunk_ref"]], prov


def test_staff_never_see_a_group_holding_a_managers_only_report(searcher: Searcher) -> None:
    found = search_contexts(
        searcher, "John had a seizure in the lounge room", principal=STAFF, k=10, as_of=AS_OF
    )
    assert found.records and not any(u.startswith("wg-ir-") for u in unit_ids(found.records))
    assert found.records[0].type in ("conversation", "qa_pair", "daily_context")


def test_the_other_tenant_sees_only_its_own_contexts_and_people(searcher: Searcher) -> None:
    found = search_contexts(searcher, "roast pumpkin", principal=BLUEGUM, k=10, as_of=AS_OF)
    assert found.records and all(u.startswith("bg-") for u in unit_ids(found.records))
    names = {p.name for r in found.records for p in r.participants}
    assert names and not names & {"Sarah Jones", "Mike Brennan", "John Pereira"}


def test_a_christmas_query_boosts_groups_of_december(searcher: Searcher) -> None:
    found = search_contexts(
        searcher, "What happened with pumpkin at Christmas?", principal=MANAGER, as_of=AS_OF
    )
    (hint,) = found.analysis.times
    assert (hint.start, hint.end) == (dt.date(2025, 12, 1), dt.date(2025, 12, 25))
    assert all(r.date.startswith("2025-12") for r in found.records[:3])
    assert all(r.why.get("date") for r in found.records[:3])


def test_a_date_range_filters_messages_by_their_own_dates(searcher: Searcher) -> None:
    """A message has no deal_date, the column a date_range filters on a deals namespace: on a
    messages namespace the range is read as the messages' days (from event_date to
    event_date_end), so it finds the contexts that overlap those days rather than nothing."""
    window = ("2025-12-20", "2025-12-31")
    as_dates = {"event_date": {"<=": window[1]}, "event_date_end": {">=": window[0]}}
    spellings: list[FilterSpec] = [
        {"date_range": list(window)},  # the API's
        {"date": {">=": window[0], "<=": window[1]}},
        parse_expressions([f"date_range={window[0]},{window[1]}"]),  # corpus search --filter
    ]
    for units in (False, True):
        same = search_contexts(
            searcher,
            "Christmas lunch",
            principal=MANAGER,
            as_of=AS_OF,
            units=units,
            filters=as_dates,
        )
        assert same.records, units
        for spelling in spellings:
            ranged = search_contexts(
                searcher,
                "Christmas lunch",
                principal=MANAGER,
                as_of=AS_OF,
                units=units,
                filters=spelling,
            )
            assert ranged.records, (units, spelling)
            assert all(
                r.date[:10] <= window[1] and window[0] <= r.date_end[:10] for r in ranged.records
            ), spelling
            assert [r.id for r in ranged.records] == [r.id for r in same.records], spelling


def spanned_groups(corpus: Home, tenant: str = "wattle") -> list[tuple[str, str, str]]:
    """(group id, first day, last day) of the tenant's groups of several days."""
    rows = corpus.store.table(active(corpus, "messages")).to_arrow()
    out = []
    for r in rows.select(["doc_id", "kind", "tenant_id", "event_date", "metadata"]).to_pylist():
        end = json.loads(r["metadata"] or "{}").get("event_date_end") or ""
        if r["kind"] == "group" and r["tenant_id"] == tenant and end[:10] > r["event_date"][:10]:
            out.append((r["doc_id"], r["event_date"][:10], end[:10]))
    return out


def found_on(searcher: Searcher, day: str) -> set[str]:
    """The contexts a manager finds with a date_range of that one day."""
    result = search_contexts(
        searcher,
        "what happened",
        principal=MANAGER,
        as_of=AS_OF,
        k=50,
        filters={"date_range": [day, day]},
    )
    return {r.id for r in result.records}


def test_a_filter_after_a_groups_first_day_still_finds_the_group_that_runs_into_it(
    corpus: Home, searcher: Searcher
) -> None:
    """A date filter on a group of messages matches its whole span: a range holds where it
    overlaps the group's days, from its first message's day to its last's."""
    spans = spanned_groups(corpus)
    assert spans, "the sample holds a group of several days"
    seen = [(g, first, last) for g, first, last in spans if g in found_on(searcher, first)]
    assert seen, "a group of several days is found on its first day"
    missed = [(g, first, last) for g, first, last in seen if g not in found_on(searcher, last)]
    assert not missed, f"found on their first day, not on their last: {missed}"
    rows = corpus.store.table(active(corpus, "messages")).to_arrow().to_pylist()
    ends = {r["doc_id"]: r["event_date_end"] for r in rows if r["kind"] == "group"}
    assert all(ends[g] == last for g, _, last in spans)
    assert all(r["event_date_end"] == r["event_date"] for r in rows if r["kind"] != "group")


def test_a_generation_made_before_rows_had_a_last_day_keeps_syncing_and_answering(
    tmp_path: Path,
) -> None:
    """A generation table made without event_date_end (before rows had a last day) keeps
    its schema through a sync that writes to it, and a date filter on it reads a group by its
    first day, as it did then."""
    settings = Settings(config_path=messages_config(tmp_path), home=tmp_path / "home")
    corpus = build_home(settings)
    group, first, last = spanned_groups(corpus)[0]
    table = corpus.store.table(active(corpus, "messages"))
    table.drop_columns(["event_date_end"])
    mine = predicates.all_of([predicates.eq("doc_id", group), predicates.eq("kind", "group")])
    table.delete(mine)

    corpus = build_home(settings, promote=False, run_id="after")  # the sync puts it back
    table = corpus.store.table(active(corpus, "messages"))
    assert "event_date_end" not in table.schema.names
    assert table.count_rows(mine) == 1
    searcher = Searcher(corpus)
    assert group in found_on(searcher, first)
    assert group not in found_on(searcher, last)  # its first day alone, as before


def test_unit_only_search_returns_units_in_the_same_shape(searcher: Searcher) -> None:
    found = search_contexts(searcher, "roast pumpkin", principal=MANAGER, units=True, as_of=AS_OF)
    assert len(found.records) == 5 and not any(r.is_group for r in found.records)
    assert all(len(r.members) == 1 and r.members[0].unit_id == r.id for r in found.records)


def test_with_fewer_groups_than_asked_units_follow_below_without_repeats(
    searcher: Searcher,
) -> None:
    # on 12 December Wattle Grove has two groups (the Secret Santa call with two who took it,
    # and the day at Picton) and one unit in no group (a shift note at Tahmoor)
    one_day = [Condition("event_date", "=", "2025-12-12")]
    found = search_contexts(searcher, "roster", principal=MANAGER, filters=one_day, as_of=AS_OF)
    # the groups, then the unit
    assert [r.is_group for r in found.records] == [True, True, False]
    assert all(r.date == "2025-12-12" for r in found.records)
    shown = [m.unit_id for r in found.records for m in r.members if r.is_group]
    assert not {r.id for r in found.records if not r.is_group} & set(shown)


def test_a_group_with_a_member_the_principal_cannot_see_is_dropped_whole(corpus: Home) -> None:
    table = corpus.store.table(active(corpus, "messages"))
    eligible = predicates.all_of(
        [predicates.eq("tenant_id", "wattle"), predicates.eq("collection", "wattle-messages")]
    )
    rows = read_rows(table, predicates.all_of([eligible, predicates.eq("kind", "group")]))
    hidden = predicates.all_of([eligible, predicates.compare("doc_id", "!=", "wg-sn-002")])
    kept, dropped = expand_groups(corpus, table, hidden, MANAGER, rows, People(corpus, MANAGER))
    assert dropped and "wg-sn-002" not in unit_ids(kept)
    assert len(kept) + len(dropped) == len(rows)


def test_groups_and_their_members_are_read_together_by_the_doc_id_index(corpus: Home) -> None:
    table = corpus.store.table(active(corpus, "messages"))
    assert "doc_id_idx" in {i.name for i in table.list_indices()}
    collections = ["wattle-messages", "bluegum-messages"]
    group = predicates.eq("kind", "group")
    # every group of both tenants asked for, read on behalf of Wattle Grove's staff
    everything = read_rows(table, group)
    wanted = [(str(g["collection"]), str(g["doc_id"])) for g in everything]
    eligible = eligibility(STAFF, collections)
    staff_groups = read_rows(table, predicates.all_of([eligible, group]))
    assert 0 < len(staff_groups) < len(wanted)

    reads = read_groups(corpus, table, eligible, STAFF, wanted)
    assert sorted(reads.groups) == sorted((g["collection"], g["doc_id"]) for g in staff_groups)
    assert reads.members and all(c == "wattle-messages" for c, _ in reads.members)  # its tenant
    # exactly the members staff may see were read: the managers-only ones have no rows here
    units = {(c, m["unit_id"]) for (c, _), mine in reads.members.items() for m in mine}
    visible = read_rows(
        table, predicates.all_of([eligible, predicates.compare("kind", "!=", "group")])
    )
    assert set(reads.units) == units & {(str(r["collection"]), unit_of(r)) for r in visible}
    assert set(reads.units) < units
    assert all(r["kind"] != "group" for rows in reads.units.values() for r in rows)
    without_rows = read_groups(corpus, table, eligible, STAFF, wanted, with_rows=False)
    assert without_rows.groups == {} and without_rows.units == reads.units
    # the read is an index lookup, not a scan of every row
    some = predicates.is_in("doc_id", sorted({g for _, g in wanted}))
    plan = table.search().where(predicates.all_of([eligible, some])).explain_plan(verbose=True)
    assert "ScalarIndexQuery" in plan and "doc_id_idx" in plan, plan


def test_every_row_of_a_person_in_more_than_ten_thousand_units_is_read(tmp_path: Path) -> None:
    """A person's units, and a page of groups' members, are read by the documents they name:
    every matching row comes back (the read stopped at 10,000 rows without a word, so a person
    in more units was shown in fewer and their roles and partners undercounted)."""
    units = [f"u{i:05d}" for i in range(10_500)]
    rows = [
        {c: f"{c}-{u}" for c in ROW_COLUMNS}
        | {"doc_id": u, "collection": "chat", "kind": "messages", "tenant_id": "wattle",
           "acl_groups": ["wattle-staff"], "block_key": "message/0", "metadata": "{}"}
        for u in units
    ]  # fmt: skip
    rows.append({**rows[0], "doc_id": "u99999", "tenant_id": "bluegum", "acl_groups": ["b"]})
    schema = pa.schema(
        [
            pa.field(c, pa.list_(pa.string()) if c == "acl_groups" else pa.string())
            for c in ROW_COLUMNS
        ]
    )
    table = lancedb.connect(tmp_path / "lance").create_table(
        "rows", pa.Table.from_pylist(rows, schema=schema)
    )
    eligible = predicates.all_of(
        [predicates.eq("tenant_id", "wattle"), predicates.eq("collection", "chat")]
    )
    assert len(read_rows(table, eligible)) == len(units)
    read = unit_rows(table, eligible, "chat", [*units, "u99999"])
    assert sorted(read) == units and all(len(r) == 1 for r in read.values())


def member(unit: str) -> MemberRecord:
    return MemberRecord(unit, 1, "response", "discord_chat", "", "", "", unit, ())


def record(gid: str, kind: str, *units: str) -> ContextRecord:
    return ContextRecord(gid, kind, "", (), "", "", "", tuple(map(member, units)), {})


def test_collapse_keeps_whole_contexts_and_never_lets_a_day_swallow_them() -> None:
    qa = record("qa", "qa_pair", "a", "b")
    conv = record("conv", "conversation", "a", "b", "c")
    day = record("day", "daily_context", "a", "b", "c", "d")
    other = record("other", "conversation", "x", "y")
    assert [r.id for r in collapse([qa, day, other, conv])] == ["conv", "day", "other"]
    assert [r.id for r in collapse([conv, qa])] == ["conv"]
    # of a question and a conversation of the very same members, the conversation, whichever
    # ranks first: a date filter that reorders them does not swap one for the other
    whole = record("whole", "conversation", "a", "b")
    assert [r.id for r in collapse([qa, whole])] == [r.id for r in collapse([whole, qa])]
    assert [r.id for r in collapse([qa, whole])] == ["whole"]


def test_collapse_keeps_a_decision_beside_its_conversation_when_asked_for() -> None:
    conv = record("conv", "conversation", "a", "b", "c", "d")
    decided = record("dec", "decision_thread", "a", "b", "c")
    topic = record("topic", "topic_cluster", "a", "b", "c", "d", "e")
    qa = record("qa", "qa_pair", "a", "b")
    same = record("qa2", "qa_pair", "a", "b", "c")
    # asked what was decided: the decision stands beside its conversation
    assert [r.id for r in collapse([topic, decided, conv, qa], decisions=True)] == [
        "topic",
        "dec",
        "conv",
    ]
    assert [r.id for r in collapse([conv, decided], decisions=True)] == ["conv", "dec"]
    assert [r.id for r in collapse([same, decided], decisions=True)] == ["dec"]
    assert [r.id for r in collapse([decided, same], decisions=True)] == ["dec"]
    # otherwise it is a part of its conversation; a topic never swallows anything
    assert [r.id for r in collapse([topic, decided, conv, qa])] == ["topic", "conv"]
    assert [r.id for r in collapse([conv, decided])] == ["conv"]
    # ... and is left out below what shows most of it already
    assert [r.id for r in collapse([conv, topic])] == ["conv"]
    wide = record("wide", "topic_cluster", "c", "d", "e", "f", "g")
    assert [r.id for r in collapse([conv, wide])] == ["conv", "wide"]


@pytest.mark.parametrize(
    ("query", "asks"),
    [
        ("what did we decide about the house meeting day", True),
        ("was the quote approved", True),
        ("was Peter allowed to go to the cricket", True),
        ("van bookings calendar, still undecided", True),
        ("roast pumpkin", False),
        ("what are we cooking for Christmas lunch", False),
    ],
)
def test_a_query_asks_what_was_decided_in_so_many_words(query: str, asks: bool) -> None:
    assert asks_decision(query) is asks


def test_everything_about_a_person_is_their_tenants_and_visible_only(searcher: Searcher) -> None:
    found = person_contexts(searcher, "Amelia Carter", principal=MANAGER)
    assert found.person is not None and found.person.name == "Amelia Carter"
    assert found.records and all(u.startswith("wg-") for u in unit_ids(found.records))
    assert "subject" in found.roles or "mentioned" in found.roles
    assert found.partners and found.partners[0]["contexts"] >= found.partners[-1]["contexts"]
    data = found.to_json()
    assert data["by_month"] and data["total_hits"] == len(found.records)
    staff = person_contexts(searcher, "Amelia Carter", principal=STAFF)
    assert not any(u.startswith("wg-ir-") for u in unit_ids(staff.records))
    assert len(staff.records) < len(found.records)
    # Bluegum's registry has no Amelia Carter: nothing of Wattle Grove's is found
    other = person_contexts(searcher, "Amelia Carter", principal=BLUEGUM)
    assert other.person is None and other.records == []


def test_a_persons_roles_and_partners_are_counted_over_every_context_not_the_limit(
    searcher: Searcher,
) -> None:
    """``limit`` caps the records shown; the roles and the partners are read from every
    context the principal may see, so they do not shrink with it."""
    everything = person_contexts(searcher, "Sarah Jones", principal=MANAGER, limit=MAX_K * 10)
    assert everything.person is not None and len(everything.records) > 5
    roles: dict[str, int] = {}
    for record in everything.records:
        for p in record.participants:
            if p.identity_id == everything.person.identity_id:
                for role in p.roles:
                    roles[role] = roles.get(role, 0) + 1
    assert everything.roles == roles
    for limit in (1, 5):
        capped = person_contexts(searcher, "Sarah Jones", principal=MANAGER, limit=limit)
        assert len(capped.records) == limit
        assert capped.roles == everything.roles, limit
        assert capped.partners == everything.partners, limit
        assert capped.to_json()["total_hits"] == limit


def test_a_person_is_found_by_phone_number_in_any_form_and_by_e_mail_address(
    searcher: Searcher,
) -> None:
    for contact in (
        "0412 555 301",
        "+61412555301",
        "(04) 1255-5301",
        "SARAH.JONES@wattlegrove.org.au",
    ):
        found = person_contexts(searcher, contact, principal=MANAGER)
        assert found.person is not None and found.person.name == "Sarah Jones", contact
        assert found.records
    # another tenant's number names no one here
    assert person_contexts(searcher, "0412 555 301", principal=BLUEGUM).person is None


def test_a_person_no_visible_unit_mentions_is_no_one_to_the_principal(
    corpus: Home, searcher: Searcher
) -> None:
    # of the tenant, but of a group that none of its units is shared with
    outsider = Principal("wattle", ("bluegum-staff",))
    for name in ("Sarah Jones", "Sarah", "0412 555 301"):
        found = person_contexts(searcher, name, principal=outsider)
        assert (found.person, found.candidates, found.records) == (None, [], []), name
    paths = ["--config", str(corpus.settings.config_path), "--home", str(corpus.settings.home)]
    out = CliRunner().invoke(
        main, [*paths, "person", "Sarah Jones", "--tenant", "wattle", "--group", "bluegum-staff"]
    )
    assert out.exit_code == 1 and out.output.startswith("no one in tenant wattle is")
    assert "Sarah" not in out.output.replace("'Sarah Jones'", "")


def test_a_query_names_only_people_a_visible_unit_mentions(searcher: Searcher) -> None:
    """Neither the analysis's people nor its topics tell a principal that the registry knows
    a name only units hidden from them mention."""
    query = "what did Sarah Jones say about the roster"
    seen = search_contexts(searcher, query, principal=STAFF, as_of=AS_OF)
    assert [p.name for p in seen.analysis.people] == ["Sarah Jones"]
    outsider = Principal("wattle", ("bluegum-staff",))
    hidden = search_contexts(searcher, query, principal=outsider, as_of=AS_OF)
    assert hidden.analysis.people == ()
    assert hidden.analysis.topics == analyze(query, as_of=AS_OF).topics
    assert "sarah" in hidden.analysis.topics and "sarah" not in seen.analysis.topics


def test_a_shared_given_name_across_tenants_resolves_in_the_askers_tenant(
    searcher: Searcher,
) -> None:
    mine = person_contexts(searcher, "Sarah", principal=MANAGER)
    theirs = person_contexts(searcher, "Sarah", principal=BLUEGUM)
    assert mine.person is not None and theirs.person is not None
    assert mine.person.name == "Sarah Jones" and theirs.person.name == "Sarah Jonas"
    assert all(u.startswith("bg-") for u in unit_ids(theirs.records))


def test_the_cli_searches_groups_on_a_messages_namespace_and_units_on_request(
    corpus: Home,
) -> None:
    paths = ["--config", str(corpus.settings.config_path), "--home", str(corpus.settings.home)]
    who = ["--tenant", "wattle", "--group", "wattle-staff", "--no-trace"]
    ask = [
        *paths,
        "search",
        "Kevin slipped getting out of the shower",
        *who,
        "--as-of",
        "2026-01-10",
    ]
    out = CliRunner().invoke(main, [*ask, "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert set(data) == {"query", "analysis", "results", "total_hits", "trace"}
    assert data["analysis"]["as_of"].startswith("2026-01-10")
    first = next(r for rs in data["results"].values() for r in rs if r["rank"] == 1)
    assert {"type", "title", "members", "participants", "location", "date", "relevance"} <= set(
        first
    )
    units = CliRunner().invoke(main, [*ask[:-2], "--units", "--json"])
    assert units.exit_code == 0 and "hits" in json.loads(units.output)
    # a unit search reads no time hints: --as-of would change nothing, and is refused
    refused = CliRunner().invoke(main, [*ask, "--units", "--json"])
    assert refused.exit_code == 2, refused.output
    assert refused.output.strip().splitlines() == [
        "error: --as-of applies to a group-first search only (the reference time of the "
        "query's time hints, which a unit search does not read): --units searches units"
    ]
    person = CliRunner().invoke(main, [*paths, "person", "Kevin", *who[:-1]])
    assert person.exit_code == 0 and person.output.startswith("Kevin Lam")
    total = int(person.output.split("\n")[0].rsplit(": ", 1)[1].split(" ")[0])
    cut = CliRunner().invoke(main, [*paths, "person", "Kevin", *who[:-1], "--limit", "1"])
    assert cut.exit_code == 0, cut.output
    assert total > 1 and f"): showing 1 of {total} contexts" in cut.output.split("\n")[0]
    nobody = CliRunner().invoke(main, [*paths, "person", "Peter Nash", *who[:-1]])
    assert nobody.exit_code == 1 and "no one in tenant wattle" in nobody.output


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--fusion", "rrf", "--no-feedback"], "--fusion, --feedback/--no-feedback"),
        (["--rrf-k", "10", "--dense-weight", "2"], "--rrf-k, --dense-weight"),
        (["--lexical-weight", "2", "--candidates", "80"], "--lexical-weight, --candidates"),
        (["--per-doc", "3", "--no-dedupe"], "--per-doc, --no-dedupe"),  # 3 as given
        (["--expand", "section", "--window", "2"], "--expand, --window"),
        (["--rerank-model", "/nowhere"], "--rerank-model"),
    ],
)
def test_the_cli_refuses_unit_search_options_on_a_group_first_search(
    corpus: Home, options: list[str], named: str
) -> None:
    """Ranking options a group-first search would drop are refused (exit 2, one line naming
    them and --units); with --units they apply to the unit search."""
    paths = ["--config", str(corpus.settings.config_path), "--home", str(corpus.settings.home)]
    ask = [*paths, "search", "roster", "--tenant", "wattle", "--group", "wattle-staff"]
    ask += ["--no-trace", "--as-of", "2026-01-10", "--json"]
    refused = CliRunner().invoke(main, [*ask, *options])
    assert refused.exit_code == 2, refused.output
    assert refused.output.strip().splitlines() == [
        f"error: {named} apply to a unit search only: namespace 'messages' holds messages and "
        "is searched group-first; add --units to search its units with them"
    ]


def test_the_cli_takes_unit_search_options_with_units(corpus: Home) -> None:
    paths = ["--config", str(corpus.settings.config_path), "--home", str(corpus.settings.home)]
    ask = [*paths, "search", "roster", "--tenant", "wattle", "--group", "wattle-staff"]
    ask += ["--no-trace", "--json", "--units", "--fusion", "rrf", "--no-feedback"]
    out = CliRunner().invoke(main, ask)
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["trace"]["fusion"] == "rrf"


def test_k_and_limit_out_of_range_are_refused_and_a_large_k_is_searched(
    searcher: Searcher,
) -> None:
    # k = -2 returned the records but the last two; above MAX_K / 2 the search of groups
    # (2k of them) was refused naming a k no one gave ("got 12000")
    for k in (0, -2, MAX_K + 1):
        with pytest.raises(InvalidQueryError, match=rf"k must be between 1 and 10,000 \(got {k}\)"):
            search_contexts(searcher, "roster", principal=MANAGER, k=k, as_of=AS_OF)
    every = search_contexts(searcher, "roster", principal=MANAGER, k=6000, as_of=AS_OF)
    assert sum(r.is_group for r in every.records) > 5
    units = search_contexts(searcher, "roster", principal=MANAGER, k=6000, units=True, as_of=AS_OF)
    assert len(units.records) > 5 and not any(r.is_group for r in units.records)
    # limit = -1 returned every context but the last
    for limit in (0, -1):
        with pytest.raises(InvalidQueryError, match=f"limit must be at least 1 \\(got {limit}\\)"):
            person_contexts(searcher, "Sarah Jones", principal=MANAGER, limit=limit)


def test_a_lone_surrogate_in_a_group_first_query_is_refused(searcher: Searcher) -> None:
    with pytest.raises(InvalidQueryError, match="at position 7"):
        search_contexts(searcher, "shower \udcff", principal=STAFF, as_of=AS_OF)


def test_the_python_api_returns_the_same_records(corpus: Home, searcher: Searcher) -> None:
    api = CorpusIndex(corpus.settings, principal=MANAGER, record_traces=False)
    data = api.contexts("roast pumpkin", as_of=AS_OF)
    direct = search_contexts(searcher, "roast pumpkin", principal=MANAGER, as_of=AS_OF).to_json()
    assert data["results"] == direct["results"] and data["total_hits"] == direct["total_hits"]
    assert api.person("Amelia Carter")["person"]["name"] == "Amelia Carter"


def golden_decisions() -> list[dict[str, Any]]:
    path = Path(__file__).resolve().parents[1] / "golden" / "messages.yaml"
    return [q for q in yaml.safe_load(path.read_text())["queries"] if q["covers"] == "decision"]


@pytest.mark.parametrize("query", golden_decisions(), ids=lambda q: q["id"])
def test_what_was_decided_finds_its_decision_thread_whole(
    searcher: Searcher, query: dict[str, Any]
) -> None:
    principal = Principal(query["tenant"], tuple(query["groups"]))
    found = search_contexts(searcher, query["text"], principal=principal, k=3, as_of=AS_OF)
    want = query["first"]["members"]
    (thread,) = [
        r for r in found.records[:3] if r.type == "decision_thread" and unit_ids([r]) == set(want)
    ]
    assert [m.unit_id for m in thread.members] == want and thread.category == "decisions"
    roles = [m.role for m in thread.members]
    assert roles[0] == "initiator" and roles.count("decision") == (roles[-1] == "decision")
    assert [r["id"] for r in found.to_json()["results"]["decisions"]].count(thread.id) == 1


def test_a_topic_across_chat_sms_and_email_is_one_searchable_context(searcher: Searcher) -> None:
    found = search_contexts(
        searcher, "van brake grinding pads rotor", principal=MANAGER, k=5, as_of=AS_OF
    )
    topics = [r for r in found.records if r.type == "topic_cluster"]
    assert topics and topics[0].category == "topics"
    sources = {m.source for m in topics[0].members}
    assert {"discord_chat", "sms_message", "email_thread"} <= sources
    assert {"wg-dc-026", "wg-sms-010", "wg-em-009"} <= unit_ids(topics[:1])
    assert topics[0].title.startswith("Topic: vehicle")
