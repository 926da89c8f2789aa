"""The predicate compiler: every value becomes a literal, checked against a real LanceDB table."""

from __future__ import annotations

import datetime as dt
import random
import tempfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from corpus_index import lance, predicates, shards
from corpus_index.errors import InvalidFilterError

LITERALS: list[tuple[str, Any, str]] = [
    ("plain string", "Phoenix", "'Phoenix'"),
    ("empty string", "", "''"),
    ("single quote doubled", "O'Hare", "'O''Hare'"),
    ("injection stays inside the quotes", "' OR 1=1 --", "''' OR 1=1 --'"),
    ("only quotes", "''", "''''''"),
    ("backslash kept as is", "a\\", "'a\\'"),
    ("backslash before a quote", "a\\'b", "'a\\''b'"),
    ("unicode kept as is", "Zürich 東京 🏙", "'Zürich 東京 🏙'"),
    ("newline kept as is", "a\nb", "'a\nb'"),
    ("true", True, "TRUE"),
    ("false", False, "FALSE"),
    ("int", 42, "42"),
    ("negative int", -7, "-7"),
    ("zero", 0, "0"),
    ("float", 6.25, "6.25"),
    ("small float", 1e-07, "1e-07"),
    ("date", dt.date(2026, 1, 15), "'2026-01-15'"),
    ("datetime", dt.datetime(2026, 1, 15, 9, 30), "'2026-01-15T09:30:00'"),
]


@pytest.mark.parametrize(("case", "value", "expected"), LITERALS, ids=[c[0] for c in LITERALS])
def test_literal(case: str, value: Any, expected: str) -> None:
    assert predicates.literal(value) == expected


REJECTED: list[tuple[str, Any, str]] = [
    ("NUL in a string", "a\x00b", "NUL character"),
    ("NaN", float("nan"), "must be finite"),
    ("infinity", float("inf"), "must be finite"),
    ("negative infinity", float("-inf"), "must be finite"),
    ("None", None, "unsupported filter value type NoneType"),
    ("bytes", b"x", "unsupported filter value type bytes"),
    ("list", ["a"], "unsupported filter value type list"),
    ("decimal", Decimal("1.5"), "unsupported filter value type Decimal"),
]


@pytest.mark.parametrize(("case", "value", "fragment"), REJECTED, ids=[c[0] for c in REJECTED])
def test_literal_rejects(case: str, value: Any, fragment: str) -> None:
    with pytest.raises(InvalidFilterError, match=fragment):
        predicates.literal(value)


@pytest.mark.parametrize("name", ["name", "_x", "asset_class", "a1", "a" * 64])
def test_valid_column_names(name: str) -> None:
    assert predicates.column(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "Name", "1a", "a-b", "a b", "a;drop", "name--", "a.b", '"x"', "a" * 65, "é", "name\n"],
)
def test_invalid_column_names(name: str) -> None:
    with pytest.raises(InvalidFilterError, match="invalid column name"):
        predicates.column(name)
    with pytest.raises(InvalidFilterError):
        predicates.eq(name, "x")


COMPOSED: list[tuple[str, str, str]] = [
    ("eq", predicates.eq("state", "AZ"), "state = 'AZ'"),
    ("eq quotes", predicates.eq("metro", "Coeur d'Alene"), "metro = 'Coeur d''Alene'"),
    ("is_in", predicates.is_in("units", [10, 20]), "units IN (10, 20)"),
    ("is_in strings", predicates.is_in("doc_id", ["a", "b'"]), "doc_id IN ('a', 'b''')"),
    ("is_in nothing", predicates.is_in("doc_id", []), "FALSE"),
    ("compare", predicates.compare("units", ">=", 100), "units >= 100"),
    (
        "compare date",
        predicates.compare("deal_date", "<", dt.date(2026, 2, 1)),
        "deal_date < '2026-02-01'",
    ),
    (
        "overlaps",
        predicates.list_overlaps("acl_groups", ["g1", "o'g"]),
        "array_has_any(acl_groups, ['g1', 'o''g'])",
    ),
    ("overlaps nothing", predicates.list_overlaps("acl_groups", []), "FALSE"),
    ("all_of", predicates.all_of(["a = 1", "", "b = 2"]), "(a = 1) AND (b = 2)"),
    ("all_of one", predicates.all_of(["a = 1"]), "(a = 1)"),
    ("all_of nothing", predicates.all_of([]), "TRUE"),
    ("all_of only empties", predicates.all_of(["", ""]), "TRUE"),
]


@pytest.mark.parametrize(("case", "got", "expected"), COMPOSED, ids=[c[0] for c in COMPOSED])
def test_composed_predicates(case: str, got: str, expected: str) -> None:
    assert got == expected


@pytest.mark.parametrize("op", ["LIKE", "==", "<>", "; DROP", ""])
def test_compare_rejects_unknown_operators(op: str) -> None:
    with pytest.raises(InvalidFilterError, match="unsupported comparison"):
        predicates.compare("units", op, 1)


# -- the same predicates evaluated by LanceDB -------------------------------------------------

ROWS = [
    {
        "id": 0,
        "name": "Phoenix",
        "units": 10,
        "score": 1e-8,
        "acl_groups": ["alpha-uw"],
        "deal_date": "2026-01-15",
    },
    {
        "id": 1,
        "name": "O'Hare",
        "units": 200,
        "score": 0.5,
        "acl_groups": ["alpha-uw", "alpha-credit"],
        "deal_date": "2025-06-30",
    },
    {
        "id": 2,
        "name": "' OR 1=1 --",
        "units": 55,
        "score": 2.0,
        "acl_groups": ["beta-team"],
        "deal_date": "2026-03-01",
    },
    {
        "id": 3,
        "name": "back\\slash",
        "units": 0,
        "score": 1e20,
        "acl_groups": [],
        "deal_date": "2024-12-31",
    },
]


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Any:
    db = lance.connect(str(tmp_path_factory.mktemp("lance")))
    return db.create_table("rows", pa.Table.from_pylist(ROWS))


def ids(table: Any, where: str) -> list[int]:
    return sorted(table.search().where(where).limit(100).to_arrow()["id"].to_pylist())


ENGINE: list[tuple[str, str, list[int]]] = [
    ("eq with a quote", predicates.eq("name", "O'Hare"), [1]),
    ("injection is a value", predicates.eq("name", "' OR 1=1 --"), [2]),
    ("injection that matches nothing", predicates.eq("name", "x' OR '1'='1"), []),
    ("backslash", predicates.eq("name", "back\\slash"), [3]),
    ("is_in", predicates.is_in("id", [1, 3, 99]), [1, 3]),
    ("is_in nothing", predicates.is_in("id", []), []),
    ("overlaps one group", predicates.list_overlaps("acl_groups", ["alpha-credit"]), [1]),
    (
        "overlaps any group",
        predicates.list_overlaps("acl_groups", ["beta-team", "alpha-uw"]),
        [0, 1, 2],
    ),
    ("overlaps nothing", predicates.list_overlaps("acl_groups", []), []),
    ("compare int", predicates.compare("units", ">", 50), [1, 2]),
    ("compare tiny float", predicates.compare("score", "<", 1e-7), [0]),
    ("compare huge float", predicates.compare("score", ">=", 1e20), [3]),
    ("compare date string", predicates.compare("deal_date", ">=", dt.date(2026, 1, 1)), [0, 2]),
    (
        "all_of",
        predicates.all_of(
            [
                predicates.compare("units", ">", 5),
                predicates.list_overlaps("acl_groups", ["alpha-uw"]),
            ]
        ),
        [0, 1],
    ),
    ("all_of nothing", predicates.all_of([]), [0, 1, 2, 3]),
]


@pytest.mark.parametrize(("case", "where", "expected"), ENGINE, ids=[c[0] for c in ENGINE])
def test_predicates_mean_what_they_say_in_lancedb(
    table: Any, case: str, where: str, expected: list[int]
) -> None:
    assert ids(table, where) == expected


@pytest.fixture(scope="module")
def scratch_db() -> Iterator[Any]:
    # module-scoped: Hypothesis runs many examples in one test call
    with tempfile.TemporaryDirectory() as folder:
        yield lance.connect(str(Path(folder) / "lance"))


def decoys(value: str) -> list[str]:
    """Values close to ``value`` that a sloppy quoting would confuse with it."""
    return [
        value + "x",
        "x" + value,
        value.replace("'", ""),
        value.replace("\\", ""),
        value.upper() if value.upper() != value else value + " ",
        "' OR 1=1 --",
        "",
        "%",
    ]


@settings(max_examples=60, deadline=None)
@given(
    value=st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40
    )
)
@example(value="'")
@example(value="\\")
@example(value="\\'")
@example(value="x' OR name != '")
@example(value="') OR TRUE --")
@example(value="\u00e9 e\u0301 \u200b")
def test_eq_finds_exactly_the_row_holding_any_text_value(scratch_db: Any, value: str) -> None:
    names = [value, *(d for d in dict.fromkeys(decoys(value)) if d != value)]
    data = pa.table({"id": list(range(len(names))), "name": names})
    table = scratch_db.create_table("values", data, mode="overwrite")
    assert ids(table, predicates.eq("name", value)) == [0]
    assert ids(table, predicates.is_in("name", [value])) == [0]


# -- hash shards: the predicate LanceDB evaluates agrees with shards.shard_of ----------------


def shard_sources() -> list[str]:
    """Source ids like the collections' (``<collection>/<doc_id>``), and odd ones."""
    rng = random.Random(21)
    alphabet = "abcXYZ019-_./' é東🏙"
    made = [f"deals/deal-{n:05d}.uw.md" for n in range(600)]
    made += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(400)]
    return [*made, "", "'", "O'Hare/x", "a\nb", "Zürich 東京 🏙"]


@pytest.fixture(scope="module")
def sources_table(scratch_db: Any) -> tuple[Any, list[str]]:
    names = list(dict.fromkeys(shard_sources()))
    data = pa.table({"id": list(range(len(names))), "source_id": names})
    return scratch_db.create_table("shard_sources", data, mode="overwrite"), names


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 8, 10, 12, 16])
def test_in_hash_shard_selects_what_shard_of_assigns(
    sources_table: tuple[Any, list[str]], count: int
) -> None:
    table, names = sources_table
    seen: list[int] = []
    for shard in range(count):
        got = shard_rows(table, names, shard, count)
        assert got == [i for i, s in enumerate(names) if shards.shard_of(s, count) == shard], (
            f"shard {shard} of {count}"
        )
        seen += got
    assert sorted(seen) == list(range(len(names)))  # every row in exactly one shard


@pytest.mark.parametrize("count", [100, 256, 1000, 65_537])
def test_in_hash_shard_of_many_shards_selects_what_shard_of_assigns(
    sources_table: tuple[Any, list[str]], count: int
) -> None:
    """Past a few shards each power of 16 is a residue of its own: a few dozen shards (those
    of sampled rows, the first, the last, and some no row falls in) are asked of LanceDB,
    not every one (a scan a shard: a thousand took half a minute)."""
    table, names = sources_table
    rng = random.Random(count)
    want: dict[int, list[int]] = {}
    held = [shards.shard_of(n, count) for n in names]
    sample = {0, count - 1, *(held[i] for i in rng.sample(range(len(names)), 24))}
    empty = sorted(set(range(count)) - set(held))  # none at 100: every shard holds rows
    sample |= set(rng.sample(empty, min(4, len(empty))))
    for shard in sorted(sample):
        want[shard] = [i for i, s in enumerate(held) if s == shard]
        assert shard_rows(table, names, shard, count) == want[shard], f"shard {shard} of {count}"
    assert sum(map(len, want.values())) >= 24  # the sampled rows, each found in its shard


def shard_rows(table: Any, names: list[str], shard: int, count: int) -> list[int]:
    """The ids of the rows LanceDB finds in ``shard`` of ``count``, sorted."""
    where = predicates.in_hash_shard("source_id", shard, count)
    return sorted(table.search().where(where).limit(len(names) + 1).to_arrow()["id"].to_pylist())


@pytest.mark.parametrize(
    ("shard", "count", "fragment"),
    [
        (0, 0, "shard count must be an integer of at least 1"),
        (0, True, "shard count must be an integer of at least 1"),
        (8, 8, r"shard must be an integer in 0\.\.7"),
        (-1, 8, r"shard must be an integer in 0\.\.7"),
        ("1", 8, r"shard must be an integer in 0\.\.7"),
    ],
)
def test_in_hash_shard_rejects_what_is_no_shard(shard: Any, count: Any, fragment: str) -> None:
    with pytest.raises(InvalidFilterError, match=fragment):
        predicates.in_hash_shard("source_id", shard, count)
    with pytest.raises(InvalidFilterError, match="invalid column name"):
        predicates.in_hash_shard("source_id; --", 0, 2)
