"""The tenant/ACL eligibility rule is one predicate; LanceDB (search) and DuckDB (the
``corpus sql`` views) select the same rows with it, and those are the rows the rule names."""

from __future__ import annotations

import itertools
from pathlib import Path

import lancedb
import pyarrow as pa
import pytest

from corpus_index.eligibility import Principal, eligibility, eligible_rows

TENANTS = ("alpha", "beta", "o'hara")
GROUP_SETS = (("uw",), ("credit",), ("uw", "credit"), ("x'y",))
COLLECTIONS = ("alpha-deals", "beta-deals", "retired")

ROWS = pa.table(
    {
        "vector_id": [f"v{i}" for i in range(36)],
        "tenant_id": [t for t, _, _ in itertools.product(TENANTS, GROUP_SETS, COLLECTIONS)],
        "acl_groups": [list(g) for _, g, _ in itertools.product(TENANTS, GROUP_SETS, COLLECTIONS)],
        "collection": [c for _, _, c in itertools.product(TENANTS, GROUP_SETS, COLLECTIONS)],
    }
)

PRINCIPALS = [
    Principal("alpha", ("uw",)),
    Principal("alpha", ("credit", "other")),
    Principal("alpha", ()),
    Principal("beta", ("uw", "credit")),
    Principal("o'hara", ("x'y",)),
    Principal("nobody", ("uw",)),
]


def by_rule(principal: Principal, live: list[str]) -> set[str]:
    return {
        r["vector_id"]
        for r in ROWS.to_pylist()
        if r["tenant_id"] == principal.tenant
        and set(principal.groups) & set(r["acl_groups"])
        and r["collection"] in live
    }


@pytest.fixture(scope="module")
def lance_table(tmp_path_factory: pytest.TempPathFactory) -> object:
    db = lancedb.connect(str(Path(tmp_path_factory.mktemp("lance"))))
    return db.create_table("rows", ROWS)


@pytest.mark.parametrize("principal", PRINCIPALS, ids=lambda p: f"{p.tenant}:{'+'.join(p.groups)}")
@pytest.mark.parametrize("live", [["alpha-deals", "beta-deals"], ["alpha-deals"], []])
def test_search_and_sql_views_select_the_same_rows(
    lance_table: object, principal: Principal, live: list[str]
) -> None:
    where = eligibility(principal, live)
    searched = {r["vector_id"] for r in lance_table.search().where(where).limit(100).to_list()}  # type: ignore[attr-defined]
    viewed = set(eligible_rows(ROWS, principal, live)["vector_id"].to_pylist())
    assert searched == viewed == by_rule(principal, live)


def test_the_rule_selects_something_to_compare() -> None:
    assert by_rule(PRINCIPALS[0], ["alpha-deals"])  # else the agreement above proves nothing
