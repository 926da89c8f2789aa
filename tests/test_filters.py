"""Filters: RFC 0013 CorpusFilter + generic conditions, compiled through predicates.py and
checked against a real LanceDB table."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from corpus_index import lance, predicates
from corpus_index.errors import InvalidFilterError
from corpus_index.filters import (
    Condition,
    CorpusFilter,
    Geo,
    as_filter,
    compile_filter,
    filterable_columns,
    parse_expression,
    parse_expressions,
)

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("deal_id", pa.string()),
        ("asset_class", pa.string()),
        ("state", pa.string()),
        ("metro", pa.string()),
        ("units", pa.int64()),
        ("deal_date", pa.string()),
        ("section", pa.string()),
        ("normalized", pa.bool_()),
        ("ratio", pa.float64()),
        ("acl_groups", pa.list_(pa.string())),
        ("metadata", pa.string()),
        ("text", pa.string()),
        ("vector", pa.list_(pa.float32(), 2)),
    ]
)
COLUMNS = filterable_columns(SCHEMA)

ROWS: list[dict[str, Any]] = [
    {
        "id": 0,
        "deal_id": "D-0",
        "asset_class": "multifamily",
        "state": "AZ",
        "metro": "Phoenix",
        "units": 30,
        "deal_date": "2025-01-10",
        "section": "risk_assessment",
        "normalized": True,
        "ratio": 0.5,
    },
    {
        "id": 1,
        "deal_id": "D-1",
        "asset_class": "industrial",
        "state": "TX",
        "metro": "Dallas",
        "units": 12,
        "deal_date": "2025-06-30",
        "section": "property",
        "normalized": False,
        "ratio": 1.5,
    },
    {
        "id": 2,
        "deal_id": "D-2",
        "asset_class": "multifamily",
        "state": "TX",
        "metro": "Coeur d'Alene",
        "units": 250,
        "deal_date": "2026-02-01",
        "section": "risk_assessment",
        "normalized": True,
        "ratio": 2.5,
    },
    {
        "id": 3,
        "deal_id": "' OR 1=1 --",
        "asset_class": "retail",
        "state": "GA",
        "metro": None,
        "units": 100,
        "deal_date": "2024-12-31",
        "section": "market_analysis",
        "normalized": False,
        "ratio": 0.0,
    },
]


def test_filterable_columns_are_the_scalar_columns() -> None:
    assert {
        "id": int,
        "deal_id": str,
        "asset_class": str,
        "state": str,
        "metro": str,
        "units": int,
        "deal_date": str,
        "section": str,
        "normalized": bool,
        "ratio": float,
    } == COLUMNS


COMPILED: list[tuple[str, Any, str]] = [
    ("nothing", None, ""),
    ("empty filter", CorpusFilter(), ""),
    ("asset class", CorpusFilter(asset_class="multifamily"), "(asset_class = 'multifamily')"),
    (
        "asset classes",
        CorpusFilter(asset_class=["multifamily", "retail"]),  # type: ignore[arg-type]
        "(asset_class IN ('multifamily', 'retail'))",
    ),
    (
        "geo",
        CorpusFilter(geo=Geo(state="TX", metro="Coeur d'Alene")),
        "(state = 'TX') AND (metro = 'Coeur d''Alene')",
    ),
    ("geo state only", CorpusFilter(geo=Geo(state="AZ")), "(state = 'AZ')"),
    ("units range", CorpusFilter(size_units_range=(20, 200)), "(units >= 20) AND (units <= 200)"),
    (
        "date range",
        CorpusFilter(date_range=("2025-01-01", "2025-12-31")),
        "(deal_date >= '2025-01-01') AND (deal_date <= '2025-12-31')",
    ),
    (
        "generic eq coerced from text",
        [Condition("units", "=", "30")],
        "(units = 30)",
    ),
    ("generic compare", [Condition("ratio", ">", "1.5")], "(ratio > 1.5)"),
    ("generic bool", [Condition("normalized", "=", "true")], "(normalized = TRUE)"),
    ("generic in", [Condition("state", "in", ["AZ", "TX"])], "(state IN ('AZ', 'TX'))"),
    ("generic not in", [Condition("state", "not in", ("GA",))], "(state NOT IN ('GA'))"),
    ("alias geo.metro", [Condition("geo.metro", "=", "Dallas")], "(metro = 'Dallas')"),
    ("alias date", [Condition("date", "<", dt.date(2025, 1, 1))], "(deal_date < '2025-01-01')"),
    (
        "mapping (RFC JSON shape)",
        {"asset_class": "retail", "geo": {"metro": "x'y"}, "units": {">=": 5}, "section": ["a"]},
        "(asset_class = 'retail') AND (metro = 'x''y') AND (units >= 5) AND (section IN ('a'))",
    ),
    (
        "injection stays a literal",
        [Condition("deal_id", "=", "' OR 1=1 --")],
        "(deal_id = ''' OR 1=1 --')",
    ),
]


@pytest.mark.parametrize(("case", "spec", "expected"), COMPILED, ids=[c[0] for c in COMPILED])
def test_compile(case: str, spec: Any, expected: str) -> None:
    assert compile_filter(spec, COLUMNS) == expected


REJECTED: list[tuple[str, Any, str]] = [
    ("unknown key", [Condition("colour", "=", "red")], "unknown filter key 'colour'"),
    ("vector column", [Condition("vector", "=", "x")], "unknown filter key 'vector'"),
    ("acl column is not a filter", [Condition("acl_groups", "=", "g")], "unknown filter key"),
    ("metadata json", [Condition("metadata", "=", "{}")], "unknown filter key"),
    ("bad column name", [Condition("a;drop", "=", "x")], "unknown filter key"),
    ("int from text", [Condition("units", ">=", "many")], "units expects an integer"),
    ("int from bool", [Condition("units", "=", True)], "units expects an integer"),
    ("int from fraction", [Condition("units", "=", 2.5)], "units expects an integer"),
    ("int past 64 bits", [Condition("units", "=", 10**20)], "units is out of range"),
    ("int past 64 bits, text", [Condition("units", ">=", "-" + "9" * 23)], "out of range"),
    ("int past 64 bits, float", [Condition("units", "in", [1, 1e30])], "out of range"),
    ("float from text", [Condition("ratio", "<", "x")], "ratio expects a number"),
    ("float nan", [Condition("ratio", "<", "nan")], "must be finite"),
    ("bool from text", [Condition("normalized", "=", "yes")], "expects true or false"),
    ("date not iso", [Condition("deal_date", ">=", "last year")], "expects an ISO date"),
    ("text from list", [Condition("state", "=", ["AZ"])], "expects text"),
    ("null value", [Condition("state", "=", None)], "a value is required"),
    ("NUL in a value", [Condition("state", "=", "A\x00Z")], "NUL character"),
]


@pytest.mark.parametrize(("case", "spec", "fragment"), REJECTED, ids=[c[0] for c in REJECTED])
def test_compile_rejects(case: str, spec: Any, fragment: str) -> None:
    with pytest.raises(InvalidFilterError, match=fragment):
        compile_filter(spec, COLUMNS)


def test_unknown_key_lists_the_filterable_keys() -> None:
    with pytest.raises(InvalidFilterError) as info:
        compile_filter([Condition("colour", "=", "red")], COLUMNS)
    assert any("filterable keys: asset_class" in n for n in info.value.__notes__)


CONSTRUCTION_ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("bad operator", {"key": "units", "op": "LIKE", "value": 1}, "unsupported filter operator"),
    ("in needs a list", {"key": "state", "op": "in", "value": "AZ"}, "needs a list"),
    ("in too long", {"key": "units", "op": "in", "value": list(range(1001))}, "at most 1000"),
]


@pytest.mark.parametrize(
    ("case", "kwargs", "fragment"), CONSTRUCTION_ERRORS, ids=[c[0] for c in CONSTRUCTION_ERRORS]
)
def test_condition_validates(case: str, kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidFilterError, match=fragment):
        Condition(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"size_units_range": (200, 20)}, "is empty"),
        ({"size_units_range": (1,)}, "must be a pair"),
        ({"size_units_range": ("a", 3)}, "must be integers"),
        ({"date_range": ("2026-01-01", "2025-01-01")}, "is empty"),
        ({"date_range": ("yesterday", "2025-01-01")}, "ISO date"),
    ],
)
def test_corpus_filter_validates_ranges(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidFilterError, match=fragment):
        CorpusFilter(**kwargs)


def test_from_json_rejects_a_bad_geo() -> None:
    with pytest.raises(InvalidFilterError, match="geo"):
        as_filter({"geo": {"country": "US"}})


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ({"asset_class": 5}, "asset_class must be a string or a list of strings"),
        ({"asset_class": True}, "asset_class must be a string or a list of strings"),
        ({"asset_class": {"like": "office"}}, "unsupported filter operator 'like'"),
        ({"size_units_range": 5}, "size_units_range must be a pair"),
        ({"size_units_range": {"low": 1, "high": 5}}, "size_units_range must be a pair"),
        ({"date_range": 2025}, "date_range must be a pair"),
    ],
)
def test_from_json_names_a_field_of_the_wrong_shape(doc: dict[str, Any], fragment: str) -> None:
    # each was a TypeError ('int' object is not iterable) or, for a mapping, its keys taken
    # as the values
    with pytest.raises(InvalidFilterError, match=fragment):
        as_filter(doc)


EXPRESSIONS: list[tuple[str, list[Condition]]] = [
    ("state=AZ", [Condition("state", "=", "AZ")]),
    ("units>=100", [Condition("units", ">=", "100")]),
    ("units > 100", [Condition("units", ">", "100")]),
    ("units<=5", [Condition("units", "<=", "5")]),
    ("units<5", [Condition("units", "<", "5")]),
    ("state!=AZ", [Condition("state", "!=", "AZ")]),
    ("state=AZ,TX", [Condition("state", "in", ("AZ", "TX"))]),
    ("state!=AZ, TX", [Condition("state", "not in", ("AZ", "TX"))]),
    ('metro="Washington, DC"', [Condition("metro", "=", "Washington, DC")]),
    ('metro="Washington, DC",Austin', [Condition("metro", "in", ("Washington, DC", "Austin"))]),
    ("metro=Coeur d'Alene", [Condition("metro", "=", "Coeur d'Alene")]),
    ("metro=' OR 1=1 --", [Condition("metro", "=", "' OR 1=1 --")]),
    ("metro=a=b", [Condition("metro", "=", "a=b")]),
    ("metro=", [Condition("metro", "=", "")]),
    ("geo.state=AZ", [Condition("geo.state", "=", "AZ")]),
    (
        "size_units_range=20,200",
        [Condition("units", ">=", "20"), Condition("units", "<=", "200")],
    ),
    (
        "date_range=2025-01-01,2025-12-31",
        [Condition("deal_date", ">=", "2025-01-01"), Condition("deal_date", "<=", "2025-12-31")],
    ),
]


@pytest.mark.parametrize(("text", "expected"), EXPRESSIONS, ids=[e[0] for e in EXPRESSIONS])
def test_parse_expression(text: str, expected: list[Condition]) -> None:
    assert parse_expression(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("state", "cannot read filter"),
        ("=AZ", "cannot read filter"),
        ("1state=AZ", "cannot read filter"),
        ("units>=1,2", "needs = or !="),
        ("size_units_range=1", "takes two values"),
        ("date_range>=2025-01-01,2026-01-01", "takes two values"),
    ],
)
def test_parse_expression_rejects(text: str, fragment: str) -> None:
    with pytest.raises(InvalidFilterError, match=fragment):
        parse_expression(text)


# -- the compiled predicates evaluated by LanceDB ---------------------------------------------


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Any:
    db = lance.connect(str(tmp_path_factory.mktemp("lance")))
    rows = [
        {**r, "acl_groups": ["g"], "metadata": "{}", "text": "x", "vector": [0.0, 1.0]}
        for r in ROWS
    ]
    return db.create_table("rows", pa.Table.from_pylist(rows, schema=SCHEMA))


ENGINE: list[tuple[str, Any, list[int]]] = [
    ("asset class", CorpusFilter(asset_class="multifamily"), [0, 2]),
    ("asset classes", CorpusFilter(asset_class=("industrial", "retail")), [1, 3]),
    ("state", CorpusFilter(geo=Geo(state="TX")), [1, 2]),
    ("metro with a quote", CorpusFilter(geo=Geo(metro="Coeur d'Alene")), [2]),
    ("units range inclusive", CorpusFilter(size_units_range=(12, 100)), [0, 1, 3]),
    ("date range inclusive", CorpusFilter(date_range=("2025-01-10", "2026-02-01")), [0, 1, 2]),
    (
        "all RFC fields",
        CorpusFilter(
            asset_class="multifamily",
            geo=Geo(state="TX"),
            size_units_range=(100, 300),
            date_range=("2026-01-01", "2026-12-31"),
        ),
        [2],
    ),
    ("injection value matches only itself", parse_expressions(["deal_id=' OR 1=1 --"]), [3]),
    ("injection value that matches nothing", parse_expressions(["deal_id=x' OR '1'='1"]), []),
    ("cli in", parse_expressions(["metro=Phoenix,Dallas"]), [0, 1]),
    ("cli not in skips NULL", parse_expressions(["metro!=Phoenix"]), [1, 2]),
    ("cli numbers are numbers", parse_expressions(["units>=100"]), [2, 3]),
    ("the widest integers compare", [Condition("units", "<=", 2**63 - 1)], [0, 1, 2, 3]),
    ("cli float", parse_expressions(["ratio>0.5"]), [1, 2]),
    ("cli bool", parse_expressions(["normalized=false"]), [1, 3]),
    ("cli date", parse_expressions(["date_range=2025-01-01,2025-12-31"]), [0, 1]),
    ("several filters AND", parse_expressions(["state=TX", "units<100"]), [1]),
    # ``column: {op: value}`` holds for asset_class as for any column (it was its keys: '!=')
    ("asset class with an operator", {"asset_class": {"!=": "multifamily"}}, [1, 3]),
    ("asset classes with in", {"asset_class": {"in": ["retail", "industrial"]}}, [1, 3]),
]


@pytest.mark.parametrize(("case", "spec", "expected"), ENGINE, ids=[c[0] for c in ENGINE])
def test_filters_mean_what_they_say_in_lancedb(
    table: Any, case: str, spec: Any, expected: list[int]
) -> None:
    where = compile_filter(spec, filterable_columns(table.schema)) or "TRUE"
    got = sorted(table.search().where(where).limit(100).to_arrow()["id"].to_pylist())
    assert got == expected


# -- the predicates.py additions ---------------------------------------------------------------


def test_an_integer_literal_past_64_bits_is_refused() -> None:
    assert predicates.literal(-(2**63)) == str(-(2**63))
    with pytest.raises(InvalidFilterError, match="outside the 64-bit integer range"):
        predicates.literal(2**63)


def test_not_in_and_any_of() -> None:
    assert predicates.not_in("state", ["A'", "B"]) == "state NOT IN ('A''', 'B')"
    assert predicates.not_in("state", []) == "state IS NOT NULL"
    assert predicates.any_of(["a = 1", "", "b = 2"]) == "(a = 1) OR (b = 2)"
    assert predicates.any_of([]) == "FALSE"
    with pytest.raises(InvalidFilterError):
        predicates.not_in("bad name", ["x"])


# -- a deal's date on a row's span of days (a group of messages runs from event_date to
# event_date_end; a message is one day; a deal keeps its deal_date) ----------------------------

SPANS = pa.schema(
    [
        ("id", pa.int64()),
        ("deal_date", pa.string()),
        ("event_date", pa.string()),
        ("event_date_end", pa.string()),
    ]
)
SPAN_ROWS: list[dict[str, Any]] = [
    # a conversation from the 22nd into the 26th
    {"id": 0, "deal_date": None, "event_date": "2025-12-22", "event_date_end": "2025-12-26"},
    # a message of the 24th
    {"id": 1, "deal_date": None, "event_date": "2025-12-24", "event_date_end": "2025-12-24"},
    # a deal: its deal_date decides, not its event_date
    {
        "id": 2,
        "deal_date": "2025-12-30",
        "event_date": "2025-12-01",
        "event_date_end": "2025-12-01",
    },
    # an undated row matches no date condition, as on one column
    {"id": 3, "deal_date": None, "event_date": None, "event_date_end": None},
]


@pytest.fixture(scope="module")
def spans(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    db = lance.connect(str(tmp_path_factory.mktemp("spans")))
    rows = pa.Table.from_pylist(SPAN_ROWS, schema=SPANS)
    # a generation table made before rows had a last day
    return db.create_table("spans", rows), db.create_table("firsts", rows.drop(["event_date_end"]))


SPANNED: list[tuple[str, Any, list[int], list[int]]] = [
    # (case, filter, ids on spans, ids on a table with no event_date_end: the first day alone)
    ("range after the first day", {"date_range": ["2025-12-25", "2025-12-31"]}, [0, 2], [2]),
    ("range before the last day", {"date_range": ["2025-12-01", "2025-12-22"]}, [0], [0]),
    ("range inside the span", {"date_range": ["2025-12-23", "2025-12-23"]}, [0], []),
    ("range on the last day", {"date_range": ["2025-12-26", "2025-12-26"]}, [0], []),
    ("range past the span", {"date_range": ["2025-12-27", "2025-12-29"]}, [], []),
    ("from a day", parse_expressions(["date>=2025-12-26"]), [0, 2], [2]),
    ("after a day", parse_expressions(["date>2025-12-26"]), [2], [2]),
    ("until a day", parse_expressions(["date<=2025-12-22"]), [0], [0]),
    ("before a day", parse_expressions(["date<2025-12-22"]), [], []),
    ("a day inside", parse_expressions(["date=2025-12-24"]), [0, 1], [1]),
    ("a day outside", parse_expressions(["date!=2025-12-24"]), [2], [0, 2]),
    ("days, one inside", parse_expressions(["date=2025-12-23,2025-12-30"]), [0, 2], [2]),
    ("no day inside", parse_expressions(["date!=2025-12-20,2025-12-26"]), [1, 2], [0, 1, 2]),
    ("an empty list", {"date": {"not in": []}}, [0, 1, 2], [0, 1, 2]),
    ("deal_date named", {"deal_date": {">=": "2025-12-26"}}, [0, 2], [2]),
    # the columns named themselves are the columns
    ("event_date named", {"event_date": {">=": "2025-12-23"}}, [1], [1]),
    ("event_date_end named", {"event_date_end": {">=": "2025-12-25"}}, [0], None),
]


@pytest.mark.parametrize(
    ("case", "spec", "expected", "first_only"), SPANNED, ids=[c[0] for c in SPANNED]
)
def test_a_deals_date_on_a_span_of_days_means_an_overlap(
    spans: tuple[Any, Any], case: str, spec: Any, expected: list[int], first_only: list[int] | None
) -> None:
    for table, want in zip(spans, (expected, first_only), strict=True):
        if want is None:
            with pytest.raises(InvalidFilterError, match="unknown filter key 'event_date_end'"):
                compile_filter(spec, filterable_columns(table.schema))
            continue
        where = compile_filter(spec, filterable_columns(table.schema))
        got = sorted(table.search().where(where).limit(100).to_arrow()["id"].to_pylist())
        assert got == want, table.name
