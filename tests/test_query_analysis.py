"""Query analysis: time expressions resolved against a reference time (a table), people matched
in one tenant's registry only, and topics from the remaining words."""

from __future__ import annotations

import datetime as dt

import pytest

from corpus_index.query_analysis import (
    MAX_TIME_CHARS,
    Person,
    QueryAnalysis,
    analyze,
    named_candidates,
)

MON = dt.datetime(2026, 1, 12, 10, 0, tzinfo=dt.UTC)  # a Monday
SAT = dt.datetime(2026, 1, 10, 9, 0, tzinfo=dt.UTC)  # the Saturday before
MID_DEC = dt.datetime(2025, 12, 15, 12, 0, tzinfo=dt.UTC)
D = dt.date

# (query, reference time, expected inclusive range of the one time hint)
TIMES = [
    ("What happened with pumpkin at Christmas?", MON, (D(2025, 12, 1), D(2025, 12, 25))),
    ("christmas lunch plans", MID_DEC, (D(2024, 12, 1), D(2024, 12, 25))),
    ("Christmas Eve roster", MON, (D(2025, 12, 1), D(2025, 12, 24))),
    ("Christmas Day menu", MON, (D(2025, 12, 1), D(2025, 12, 25))),
    ("who worked on Boxing Day", MON, (D(2025, 12, 1), D(2025, 12, 26))),
    ("Boxing Day 2024 BBQ", MON, (D(2024, 12, 1), D(2024, 12, 26))),
    # a year outside the eleven around the reference time is that year (it was December 2027)
    ("the Boxing Day 2010 flood", MON, (D(2010, 12, 1), D(2010, 12, 26))),
    ("Australia Day 2015 outing", MON, (D(2015, 1, 1), D(2015, 1, 26))),
    ("Anzac Day 2031 march", MON, (D(2031, 4, 1), D(2031, 4, 25))),
    ("anything on Australia Day", MON, (D(2025, 1, 1), D(2025, 1, 27))),
    # NSW's own spelling is its Labour Day in October (it was the US Labor Day in September)
    ("the Labour Day barbecue", MON, (D(2025, 10, 1), D(2025, 10, 6))),
    ("the Labor Day barbecue", MON, (D(2025, 10, 1), D(2025, 10, 6))),
    ("new year fireworks", MON, (D(2026, 1, 1), D(2026, 1, 1))),
    # a fixed day the recognizer knows, with a year (it left "Christmas 2020" unresolved: no hint)
    ("Christmas 2020 roster", MON, (D(2020, 12, 1), D(2020, 12, 25))),
    ("New Year 2025 party", MON, (D(2025, 1, 1), D(2025, 1, 1))),
    ("the Christmas Eve 2030 shifts", MON, (D(2030, 12, 1), D(2030, 12, 24))),
    ("New Year's Eve of 2024 party", MON, (D(2024, 12, 1), D(2024, 12, 31))),
    # a year after a comma is the day's (it was the year 2020 and the Christmas just gone)
    ("Christmas, 2020 roster", MON, (D(2020, 12, 1), D(2020, 12, 25))),
    ("Christmas Eve, 2019 shifts", MON, (D(2019, 12, 1), D(2019, 12, 24))),
    ("Boxing Day, 2024 BBQ", MON, (D(2024, 12, 1), D(2024, 12, 26))),
    ("Boxing Day of 2024 BBQ", MON, (D(2024, 12, 1), D(2024, 12, 26))),
    # Easter is Easter Sunday (it was no hint, and "Easter 2021" not even the year)
    ("Easter 2021 outing", MON, (D(2021, 4, 1), D(2021, 4, 4))),
    ("Easter, 2021 outing", MON, (D(2021, 4, 1), D(2021, 4, 4))),
    ("the Easter egg hunt", MON, (D(2025, 4, 1), D(2025, 4, 20))),
    ("Easter Monday 2021 outing", MON, (D(2021, 4, 1), D(2021, 4, 5))),
    ("what happened last week", MON, (D(2026, 1, 5), D(2026, 1, 11))),
    ("van issues this week", MON, (D(2026, 1, 12), D(2026, 1, 18))),
    ("what happened yesterday", MON, (D(2026, 1, 11), D(2026, 1, 11))),
    ("notes from today", MON, (D(2026, 1, 12), D(2026, 1, 12))),
    ("fall two days ago", MON, (D(2026, 1, 10), D(2026, 1, 10))),
    ("anything over the weekend", MON, (D(2026, 1, 10), D(2026, 1, 11))),
    ("what happened over the weekend", SAT, (D(2026, 1, 10), D(2026, 1, 11))),
    ("last weekend outing", MON, (D(2026, 1, 10), D(2026, 1, 11))),
    ("medication review last Friday", MON, (D(2026, 1, 9), D(2026, 1, 9))),
    ("rosters last month", MON, (D(2025, 12, 1), D(2025, 12, 31))),
    ("incidents in March", MON, (D(2025, 3, 1), D(2025, 3, 31))),
    ("incidents in March 2025", MON, (D(2025, 3, 1), D(2025, 3, 31))),
    ("the audit in December", MON, (D(2025, 12, 1), D(2025, 12, 31))),
    ("meeting on 10 December 2025", MON, (D(2025, 12, 10), D(2025, 12, 10))),
    ("shift notes 2025-12-10", MON, (D(2025, 12, 10), D(2025, 12, 10))),
    ("what happened on Dec 10", MON, (D(2025, 12, 10), D(2025, 12, 10))),
    ("leave between 3 and 5 March", MON, (D(2025, 3, 3), D(2025, 3, 5))),
    ("roster from 1 Dec to 5 Dec", MON, (D(2025, 12, 1), D(2025, 12, 5))),
    ("falls in the last 3 days", MON, (D(2026, 1, 9), D(2026, 1, 12))),
    ("seizure at 3pm yesterday", MON, (D(2026, 1, 11), D(2026, 1, 11))),
]


@pytest.mark.parametrize(("query", "as_of", "expected"), TIMES, ids=[t[0] for t in TIMES])
def test_time_expressions_resolve_to_the_expected_range(
    query: str, as_of: dt.datetime, expected: tuple[dt.date, dt.date]
) -> None:
    found = analyze(query, as_of=as_of)
    assert [(t.start, t.end) for t in found.times] == [expected], found.to_json()


def test_a_holiday_keeps_its_day_and_its_month_leading_up_to_it() -> None:
    (hint,) = analyze("Boxing Day", as_of=MON).times
    assert (hint.day, hint.how) == (D(2025, 12, 26), "holiday")
    assert hint.overlaps(D(2025, 12, 10), None) and not hint.overlaps(D(2025, 11, 30), None)
    assert not hint.overlaps(None, None)


def test_a_named_day_with_a_year_keeps_its_day_and_leaves_the_topics() -> None:
    (hint,) = analyze("Christmas 2020 roster", as_of=MON).times
    assert (hint.text, hint.day) == ("Christmas 2020", D(2020, 12, 25))
    assert analyze("Christmas 2020 roster", as_of=MON).topics == ("roster",)


@pytest.mark.parametrize(
    ("query", "text", "day"),
    [
        ("Easter 2021 roster", "Easter 2021", D(2021, 4, 4)),
        ("Christmas, 2020 roster", "Christmas, 2020", D(2020, 12, 25)),
        ("roster Easter of 2021", "Easter of 2021", D(2021, 4, 4)),
    ],
)
def test_easter_and_a_day_with_its_year_after_a_comma_keep_their_day(
    query: str, text: str, day: dt.date
) -> None:
    found = analyze(query, as_of=MON)
    assert [(t.text, t.day) for t in found.times] == [(text, day)] and found.topics == ("roster",)


def test_easter_is_the_countrys_own_where_no_holiday_is_its_sunday() -> None:
    # national Australia holds Good Friday and Easter Monday, not Easter Sunday (NSW does);
    # Greece holds the orthodox Easter
    for country, subdivision, day in (("AU", None, D(2021, 4, 4)), ("GR", None, D(2021, 5, 2))):
        found = analyze("Easter 2021", as_of=MON, country=country, subdivision=subdivision)
        assert [t.day for t in found.times] == [day], country


def test_a_query_without_time_has_no_hint_and_keeps_its_words_as_topics() -> None:
    found = analyze("roast pumpkin for the residents", as_of=MON)
    assert found.times == ()
    assert found.topics == ("roast", "pumpkin", "residents")


WATTLE = [
    Person("idn_sarah", "Sarah Jones", ("SJ", "Sarah J")),
    Person("idn_amelia", "Amelia Carter", ()),
    Person("idn_john", "John Pereira", ("Johnny",)),
    Person("idn_helen", "Helen Pereira", ()),
]


def test_people_match_by_name_alias_and_unique_given_name_and_leave_the_topics() -> None:
    found = analyze("What did SJ say about Amelia's physio last week?", as_of=MON, people=WATTLE)
    assert [p.identity_id for p in found.people] == ["idn_sarah", "idn_amelia"]
    assert found.topics == ("say", "physio")
    assert [t.text for t in found.times] == ["last week"]


def test_a_full_name_wins_over_its_parts_and_a_shared_surname_names_nobody() -> None:
    found = analyze("Helen Pereira visiting; the Pereira family", as_of=MON, people=WATTLE)
    assert [(p.text, p.identity_id) for p in found.people] == [("Helen Pereira", "idn_helen")]
    assert "pereira" in found.topics


@pytest.mark.parametrize(
    "query",
    [
        "What did SJ say about Amelia's physio last week?",
        "Helen Pereira visiting; the Pereira family",
        "Sarah and Johnny on Friday",
        "Amelia",
        "idn_john",
        "no one here",
    ],
)
def test_the_people_a_text_could_name_decide_who_it_names(query: str) -> None:
    """Cut to the candidates, the registry names the same people; without any one of them
    it may name others (a shared given name is then no longer shared)."""
    crowd = [*WATTLE, Person("idn_sarah2", "Sarah Lee", ()), Person("idn_x", "Xavier Ng", ())]
    candidates = named_candidates(query, crowd)
    assert analyze(query, as_of=MON, people=candidates) == analyze(query, as_of=MON, people=crowd)
    assert all(p.identity_id != "idn_x" for p in candidates)


def test_a_given_name_two_candidates_share_names_neither() -> None:
    crowd = [*WATTLE, Person("idn_sarah2", "Sarah Lee", ())]
    assert {p.identity_id for p in named_candidates("Sarah", crowd)} == {"idn_sarah", "idn_sarah2"}
    assert analyze("Sarah", as_of=MON, people=crowd).people == ()
    alone = analyze("Sarah", as_of=MON, people=WATTLE).people
    assert [p.identity_id for p in alone] == ["idn_sarah"]


def test_people_are_only_those_of_the_registry_given() -> None:
    """Another tenant's registry is never consulted: a name it alone knows stays a topic."""
    other = [Person("idn_peter", "Peter Nash", ("Pete",))]
    mine = analyze("Pete Nash rostered", as_of=MON, people=WATTLE)
    theirs = analyze("Pete Nash rostered", as_of=MON, people=other)
    assert mine.people == () and mine.topics == ("pete", "nash", "rostered")
    assert [p.identity_id for p in theirs.people] == ["idn_peter"]


def test_the_analysis_is_json_serialisable_with_its_reference_time() -> None:
    found = analyze("Amelia on Boxing Day", as_of=MON, people=WATTLE)
    data = found.to_json()
    assert data["as_of"] == MON.isoformat()
    assert data["times"][0]["day"] == "2025-12-26"
    assert data["people"] == [
        {"text": "Amelia", "identity_id": "idn_amelia", "name": "Amelia Carter"}
    ]
    assert isinstance(found, QueryAnalysis)


def test_time_hints_are_read_from_the_first_max_time_chars_of_a_long_query() -> None:
    # the recognizer's cost grows with the date-like words it reads: a 2,000-character list of
    # dates took 36 s, so only a bounded start of the query is read for time hints
    filler = "roof leak " * (MAX_TIME_CHARS // 10 + 5)
    early = analyze("meeting on 10 December 2025 " + filler, as_of=MON)
    assert [(t.start, t.end) for t in early.times] == [(D(2025, 12, 10), D(2025, 12, 10))]
    late = analyze(filler + "meeting on 10 December 2025", as_of=MON)
    assert late.times == () and "meeting" in late.topics
    assert late.times_read is not None and late.times_read <= MAX_TIME_CHARS
    assert late.to_json()["times_read"] == late.times_read
    assert "times_read" not in analyze("meeting on 10 December 2025", as_of=MON).to_json()


def test_a_date_across_the_bound_is_not_read_in_part() -> None:
    # "2025-12-10" cut at the bound would be read as "2025-1" (all of January)
    at = "x " * ((MAX_TIME_CHARS - 5) // 2)
    found = analyze(at + "2025-12-10 incident", as_of=MON)
    assert len(at) < MAX_TIME_CHARS < len(at) + len("2025-12-10")
    assert found.times == () and found.times_read == len(at) - 1
