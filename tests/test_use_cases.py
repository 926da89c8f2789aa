"""RFC 0013's use cases on the bundled sample corpus (hash embedder): similar deals, calibration
SQL and risk patterns, each checked against oracles computed from the files or the raw rows,
and each kept inside the principal's tenant and groups."""

from __future__ import annotations

import functools
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.errors import InvalidQueryError, QueryLimitError, ReadOnlyQueryError
from corpus_index.filters import CorpusFilter
from corpus_index.home import Home
from corpus_index.kinds.uw_deals import parse_text
from corpus_index.registry import open_registry
from corpus_index.search import Principal, Searcher
from corpus_index.traces import TraceStore
from corpus_index.use_cases import neighbour_table, risk_patterns, run_sql, similar_deals
from tests.searchkit import ROOT, active, build_home, sample_config

MERIDIAN = Principal("meridian", ("uw-team", "credit-committee"))
MERIDIAN_UW = Principal("meridian", ("uw-team",))
HARBOR = Principal("harbor", ("harbor-analysts", "harbor-credit"))


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Home:
    root = tmp_path_factory.mktemp("sample")
    return build_home(Settings(config_path=sample_config(root), home=root / "home"))


@pytest.fixture(scope="module")
def searcher(sample: Home) -> Searcher:
    return Searcher(sample, traces=TraceStore(open_registry(sample.settings)))


@functools.cache
def deal_files(tenant: str) -> dict[str, tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]]:
    """deal_id -> (front matter, section -> blocks), read straight from the sample files."""
    out = {}
    for path in sorted((ROOT / "sample_corpus" / tenant).glob("*.uw.md")):
        front, blocks = parse_text(str(path), path.read_text())
        sections: dict[str, list[dict[str, Any]]] = {}
        for section, _, content in blocks:
            sections.setdefault(section, []).append(content)
        out[str(front["deal_id"])] = (front, sections)
    return out


def visible_deals(tenant: str, groups: tuple[str, ...]) -> set[str]:
    return {d for d, (front, _) in deal_files(tenant).items() if set(front["acl"]) & set(groups)}


# -- similar deals ----------------------------------------------------------------------------


def oracle_similar(corpus: Home, deal_id: str, principal: Principal) -> dict[str, float]:
    """Mean over the deal's sections of the best cosine with each other visible deal's same section."""
    table = corpus.store.table(active(corpus)).to_arrow().to_pylist()
    rows = [
        r
        for r in table
        if r["tenant_id"] == principal.tenant and set(r["acl_groups"]) & set(principal.groups)
    ]

    def unit(v: list[float]) -> Any:
        a = np.asarray(v, dtype=np.float64)
        return a / np.linalg.norm(a)

    mine = [r for r in rows if r["deal_id"] == deal_id]
    sections = sorted({r["section"] for r in mine})
    scores: dict[str, float] = {}
    for other in {r["deal_id"] for r in rows} - {deal_id}:
        theirs = [r for r in rows if r["deal_id"] == other]
        total = 0.0
        for s in sections:
            sims = [
                float(unit(a["vector"]) @ unit(b["vector"]))
                for a in mine
                if a["section"] == s
                for b in theirs
                if b["section"] == s
            ]
            total += max(sims) if sims else 0.0
        scores[other] = total / len(sections)
    return scores


@pytest.mark.parametrize(
    ("deal", "principal"),
    [("DEAL-2026-0042", MERIDIAN), ("DEAL-2025-0131", MERIDIAN_UW), ("DEAL-2024-0263", HARBOR)],
)
def test_similar_deals_match_the_oracle(
    sample: Home, searcher: Searcher, deal: str, principal: Principal
) -> None:
    result = similar_deals(searcher, deal, principal=principal, k=5)
    assert result is not None and result.deal_id == deal
    expected = oracle_similar(sample, deal, principal)
    top = sorted(expected.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    assert [(d.deal_id, d.score) for d in result.deals] == [
        (d, pytest.approx(s, abs=2e-6)) for d, s in top
    ]
    assert deal not in {d.deal_id for d in result.deals}
    assert {d.deal_id for d in result.deals} <= visible_deals(principal.tenant, principal.groups)
    for d in result.deals:
        assert d.score == pytest.approx(
            sum(d.sections.get(s, 0.0) for s in result.sections) / len(result.sections), abs=2e-6
        )
        assert d.asset_class and d.metro and d.units and d.deal_date


def test_similar_accepts_doc_id_and_source_id(searcher: Searcher) -> None:
    a = similar_deals(searcher, "deal-2026-0042", principal=MERIDIAN, k=3)
    b = similar_deals(searcher, "meridian-deals/deal-2026-0042", principal=MERIDIAN, k=3)
    assert a is not None and b is not None
    assert [d.source_id for d in a.deals] == [d.source_id for d in b.deals]


def test_similar_compares_the_sections_named_and_refuses_one_the_deal_lacks(
    searcher: Searcher,
) -> None:
    whole = similar_deals(searcher, "deal-2026-0042", principal=MERIDIAN, k=3)
    assert whole is not None and len(whole.sections) > 1
    one = similar_deals(
        searcher, "deal-2026-0042", principal=MERIDIAN, k=3, sections=whole.sections[:1]
    )
    assert one is not None and one.sections == whole.sections[:1]
    for sections in (["financials"], [whole.sections[0], "financials"]):
        with pytest.raises(InvalidQueryError, match="has no section financials") as refused:
            similar_deals(searcher, "deal-2026-0042", principal=MERIDIAN, sections=sections)
        assert whole.sections[0] in str(refused.value)
    with pytest.raises(InvalidQueryError, match="no section: name some"):
        similar_deals(searcher, "deal-2026-0042", principal=MERIDIAN, sections=[])


def test_similar_respects_the_principal(searcher: Searcher) -> None:
    restricted = visible_deals("meridian", ("credit-committee",)) - visible_deals(
        "meridian", ("uw-team",)
    )
    assert restricted == {"DEAL-2024-0219", "DEAL-2026-0068"}
    for deal in restricted:  # invisible deals are "not found", not an error that confirms them
        assert similar_deals(searcher, deal, principal=MERIDIAN_UW) is None
        assert similar_deals(searcher, deal, principal=MERIDIAN) is not None
    assert similar_deals(searcher, "DEAL-2026-0042", principal=HARBOR) is None
    result = similar_deals(searcher, "DEAL-2026-0042", principal=MERIDIAN_UW, k=50)
    assert result is not None
    assert not {d.deal_id for d in result.deals} & restricted
    assert len(result.deals) == len(visible_deals("meridian", ("uw-team",))) - 1


def test_similar_with_filters_and_sections(searcher: Searcher) -> None:
    result = similar_deals(
        searcher,
        "DEAL-2026-0042",
        principal=MERIDIAN,
        k=10,
        filters=CorpusFilter(asset_class="multifamily"),
        sections=["market_analysis"],
    )
    assert result is not None and result.sections == ["market_analysis"]
    multifamily = {
        d for d, (f, _) in deal_files("meridian").items() if f["asset_class"] == "multifamily"
    }
    assert {d.deal_id for d in result.deals} == multifamily - {"DEAL-2026-0042"}
    assert all(set(d.sections) == {"market_analysis"} for d in result.deals)


# -- calibration SQL --------------------------------------------------------------------------


MEDIAN_EXIT_CAP = """
SELECT median((b.content->>'exit_cap_rate_pct')::DOUBLE) AS median_exit_cap, count(*) AS deals
FROM blocks b JOIN deals d USING (source_id)
WHERE b.section = 'debt_terms' AND d.asset_class = 'multifamily'
"""


@pytest.mark.parametrize(
    "principal", [MERIDIAN, MERIDIAN_UW, HARBOR], ids=lambda p: "/".join(p.groups)
)
def test_median_exit_cap_rate_matches_the_files(searcher: Searcher, principal: Principal) -> None:
    files = deal_files(principal.tenant)
    caps = [
        float(sections["debt_terms"][0]["exit_cap_rate_pct"])
        for deal, (front, sections) in files.items()
        if deal in visible_deals(principal.tenant, principal.groups)
        and front["asset_class"] == "multifamily"
    ]
    result = run_sql(searcher, MEDIAN_EXIT_CAP, principal=principal)
    assert result.columns == ["median_exit_cap", "deals"]
    if caps:
        assert result.rows == [(pytest.approx(statistics.median(caps)), len(caps))]
    else:
        assert result.rows == [(None, 0)]


@pytest.mark.parametrize(
    "principal", [MERIDIAN, MERIDIAN_UW, HARBOR], ids=lambda p: "/".join(p.groups)
)
def test_views_hold_only_what_the_principal_may_see(
    searcher: Searcher, principal: Principal
) -> None:
    expected = visible_deals(principal.tenant, principal.groups)
    deals = run_sql(searcher, "SELECT deal_id FROM deals", principal=principal)
    assert {r[0] for r in deals.rows} == expected
    for view, column in [("blocks", "deal_id"), ("chunks", "deal_id"), ("neighbours", "deal_id")]:
        got = run_sql(searcher, f"SELECT DISTINCT {column} FROM {view}", principal=principal)
        assert {r[0] for r in got.rows} == expected, view
    tenants = run_sql(searcher, "SELECT DISTINCT tenant_id FROM chunks", principal=principal)
    assert tenants.rows == [(principal.tenant,)]
    other = run_sql(
        searcher, "SELECT DISTINCT neighbour_deal_id FROM neighbours", principal=principal
    )
    assert {r[0] for r in other.rows} <= expected
    cols = run_sql(searcher, "SELECT * FROM chunks LIMIT 1", principal=principal).columns
    assert "vector" not in cols and "text" in cols and "acl_groups" in cols


def test_neighbours_view(searcher: Searcher) -> None:
    n = len(visible_deals("meridian", MERIDIAN.groups))
    result = run_sql(
        searcher,
        "SELECT deal_id, section, count(*), min(rank), max(rank), "
        "bool_and(deal_id <> neighbour_deal_id) FROM neighbours GROUP BY ALL ORDER BY ALL",
        principal=MERIDIAN,
        neighbours=5,
    )
    assert result.rows and all(r[2:] == (5, 1, 5, True) for r in result.rows)
    assert len(result.rows) == n * 4  # four embedded sections per deal
    ranked = run_sql(
        searcher,
        "SELECT score FROM neighbours WHERE deal_id = 'DEAL-2026-0042' "
        "AND section = 'risk_assessment' ORDER BY rank",
        principal=MERIDIAN,
    )
    scores = [r[0] for r in ranked.rows]
    assert scores == sorted(scores, reverse=True) and len(scores) == 10


def test_neighbour_table_by_hand() -> None:
    import pyarrow as pa

    vecs = [[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [1.0, 0.0]]
    rows = pa.table(
        {
            "source_id": ["a", "b", "c", "a"],
            "deal_id": ["A", "B", "C", "A"],
            "section": ["s", "s", "s", "t"],
            "vector": pa.array(vecs, pa.list_(pa.float32(), 2)),
        }
    )
    got = neighbour_table(rows, 2).to_pylist()
    pairs = [(r["deal_id"], r["neighbour_deal_id"], r["rank"], round(r["score"], 3)) for r in got]
    assert pairs == [
        ("A", "B", 1, 0.8),
        ("A", "C", 2, 0.0),
        ("B", "A", 1, 0.8),
        ("B", "C", 2, 0.6),
        ("C", "B", 1, 0.6),
        ("C", "A", 2, 0.0),
    ]  # section t has one deal: no neighbours


@pytest.mark.parametrize(
    "sql",
    [
        "DROP VIEW deals",
        "CREATE TABLE x AS SELECT 1",
        "INSERT INTO deals SELECT * FROM deals",
        "SELECT 1; SELECT 2",
        "PRAGMA database_list",
        "SET enable_external_access = true",
        "COPY deals TO '/tmp/out.csv'",
        "ATTACH 'registry.duckdb'",
        "INSTALL httpfs",
    ],
)
def test_only_one_select_is_allowed(searcher: Searcher, sql: str) -> None:
    with pytest.raises(ReadOnlyQueryError, match="only one read-only SELECT"):
        run_sql(searcher, sql, principal=MERIDIAN)


def test_sql_cannot_reach_files(sample: Home, searcher: Searcher) -> None:
    warehouse = sample.warehouse.path("parsed_blocks", "harbor-deals")
    assert warehouse.is_file()
    for sql in [
        f"SELECT * FROM read_parquet('{warehouse}')",
        f"SELECT * FROM '{warehouse}'",
        "SELECT * FROM read_csv('/etc/hostname')",
        f"SELECT * FROM read_text('{sample.settings.registry_path}')",
        "SELECT * FROM glob('/*')",
    ]:
        with pytest.raises(InvalidQueryError, match="the SQL failed"):
            run_sql(searcher, sql, principal=MERIDIAN)


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [("SELEC 1", "cannot parse"), ("SELECT nope FROM deals", "the SQL failed")],
)
def test_bad_sql_is_a_clean_error(searcher: Searcher, sql: str, fragment: str) -> None:
    with pytest.raises(InvalidQueryError, match=fragment):
        run_sql(searcher, sql, principal=MERIDIAN)


def test_sql_rows_are_capped(searcher: Searcher) -> None:
    result = run_sql(searcher, "SELECT * FROM chunks", principal=MERIDIAN, max_rows=7)
    assert len(result.rows) == 7 and result.truncated


# -- risk patterns ----------------------------------------------------------------------------


def flags_by_deal(tenant: str) -> dict[str, list[dict[str, Any]]]:
    return {
        deal: [f for block in sections["risk_assessment"] for f in block.get("flags", [])]
        for deal, (_, sections) in deal_files(tenant).items()
    }


def norm(text: Any) -> str:
    return " ".join(str(text).split())


def test_risk_pattern_by_text_shows_the_resolution(searcher: Searcher) -> None:
    result = risk_patterns(
        searcher, "hurricane windstorm insurance premiums", principal=MERIDIAN, k=5
    )
    flags = flags_by_deal("meridian")
    assert result.matches
    assert len({m.deal_id for m in result.matches}) == len(result.matches)  # one per deal
    for m in result.matches:
        assert "/risk_assessment/" in m.chunk_ref
        file_flag = next(f for f in flags[m.deal_id] if f["id"] == m.flag_id)
        assert m.resolution == norm(file_flag["resolution"])
        assert m.mitigant == norm(file_flag["mitigant"])
        assert m.severity == file_flag["severity"]
        assert m.deal_date == str(deal_files("meridian")[m.deal_id][0]["date"])
    insurance = {m.flag_id for m in result.matches[:3]}
    assert insurance & {
        "windstorm_coverage",
        "hurricane_insurance_market",
        "property_insurance_cost",
    }


def test_risk_pattern_by_exact_flag_id(searcher: Searcher) -> None:
    result = risk_patterns(searcher, "street_rate_decline", principal=HARBOR, k=3)
    [first] = [m for m in result.matches if m.deal_id == "DEAL-2024-0263"]
    assert first.flag_id == "street_rate_decline"
    assert first.resolution and "flat for three years" in first.resolution


def test_risk_pattern_from_a_deal_flag_looks_only_at_prior_deals(searcher: Searcher) -> None:
    result = risk_patterns(
        searcher,
        principal=MERIDIAN,
        deal="DEAL-2026-0042",
        flag="building_systems_end_of_life",
        k=20,
    )
    assert "galvanized plumbing" in result.query
    assert result.matches
    dates = {d: str(f["date"]) for d, (f, _) in deal_files("meridian").items()}
    assert "DEAL-2026-0042" not in {m.deal_id for m in result.matches}
    assert all(dates[m.deal_id] < "2026-03-14" for m in result.matches)
    prior = {d for d, date in dates.items() if date < "2026-03-14"}
    assert {m.deal_id for m in result.matches} == prior  # k=20 covers every prior deal
    assert all(m.resolution for m in result.matches)


def test_risk_pattern_errors(searcher: Searcher) -> None:
    with pytest.raises(InvalidQueryError, match="has no risk flag 'nope'.*renovation_premium"):
        risk_patterns(searcher, principal=MERIDIAN, deal="DEAL-2026-0042", flag="nope")
    with pytest.raises(InvalidQueryError, match="no risk_assessment of deal"):
        risk_patterns(searcher, principal=HARBOR, deal="DEAL-2026-0042", flag="renovation_premium")
    with pytest.raises(InvalidQueryError, match="give the risk"):
        risk_patterns(searcher, "  ", principal=MERIDIAN)


def test_risk_patterns_stay_in_scope(searcher: Searcher) -> None:
    visible = visible_deals("meridian", ("uw-team",))
    for mode in ("dense", "lexical", "hybrid"):
        result = risk_patterns(
            searcher,
            "grocery anchor hotel franchise deferred maintenance insurance",
            principal=MERIDIAN_UW,
            k=50,
            mode=mode,
        )
        found = {m.deal_id for m in result.matches}
        assert found, mode  # an empty result would pass the scope check without checking it
        assert found <= visible


# -- traces of the use cases, and the CLI -----------------------------------------------------


def test_use_cases_leave_one_trace_each(sample: Home, searcher: Searcher) -> None:
    store = TraceStore(open_registry(sample.settings))
    before = store.count()
    similar_deals(searcher, "DEAL-2026-0042", principal=MERIDIAN)
    run_sql(searcher, "SELECT 1", principal=MERIDIAN)
    risk_patterns(searcher, "flood", principal=MERIDIAN)
    assert store.count() == before + 3
    kinds = [t["kind"] for t in store.recent(3)]
    assert kinds == ["risk_patterns", "sql", "similar"]


def cli(corpus: Home, *args: str) -> Any:
    base = ["--config", str(corpus.settings.config_path), "--home", str(corpus.settings.home)]
    return CliRunner().invoke(main, [*base, *args])


def test_cli_use_cases(sample: Home) -> None:
    who = ["--tenant", "meridian", "--group", "uw-team", "--group", "credit-committee"]
    out = cli(sample, "similar", "DEAL-2026-0042", *who, "--k", "3", "--json")
    assert out.exit_code == 0, out.output
    assert len(json.loads(out.stdout)["deals"]) == 3
    human = cli(sample, "similar", "DEAL-2026-0042", *who, "--k", "2")
    assert human.exit_code == 0 and "deals like DEAL-2026-0042" in human.output

    out = cli(sample, "sql", "SELECT count(*) AS n FROM deals", *who, "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["rows"] == [{"n": 14}]
    human = cli(sample, "sql", "SELECT deal_id, units FROM deals ORDER BY 1 LIMIT 2", *who)
    assert human.exit_code == 0 and "DEAL-2024-0093" in human.output

    out = cli(
        sample,
        "risk-patterns",
        "--deal",
        "DEAL-2026-0042",
        "--flag",
        "renovation_premium",
        *who,
        "--json",
    )
    assert out.exit_code == 0, out.output
    assert all(m["resolution"] for m in json.loads(out.stdout)["matches"])
    human = cli(sample, "risk-patterns", "roof leaks", *who, "--k", "2")
    assert human.exit_code == 0 and "resolution:" in human.output

    out = cli(sample, "traces", "--limit", "2", "--json")
    assert out.exit_code == 0 and [t["kind"] for t in json.loads(out.stdout)["traces"]] == [
        "risk_patterns",
        "risk_patterns",
    ]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (
            ["similar", "DEAL-2026-0042", "--tenant", "harbor", "--group", "harbor-credit"],
            "no deal 'DEAL-2026-0042' is visible",
        ),
        (
            ["sql", "DELETE FROM deals", "--tenant", "meridian", "--group", "uw-team"],
            "only one read-only SELECT",
        ),
        (
            [
                "risk-patterns",
                "--deal",
                "DEAL-2026-0042",
                "--flag",
                "x",
                "--tenant",
                "meridian",
                "--group",
                "uw-team",
            ],
            "has no risk flag",
        ),
    ],
)
def test_cli_use_case_errors_exit_2(sample: Home, args: list[str], fragment: str) -> None:
    out = cli(sample, *args)
    assert out.exit_code == 2, out.output
    assert fragment in out.output and "Traceback" not in out.output


def test_sample_root_is_the_repo() -> None:
    assert (ROOT / "sample_corpus").is_dir() and Path(ROOT / "corpus.yaml").is_file()


def test_sql_is_stopped_at_its_time_limit(searcher: Searcher) -> None:
    started = time.perf_counter()
    with pytest.raises(QueryLimitError, match="time limit of 0.5 s"):
        run_sql(
            searcher, "SELECT count(*) FROM range(100000000000)", principal=MERIDIAN, timeout_s=0.5
        )
    assert time.perf_counter() - started < 20


def test_sql_is_stopped_at_its_memory_limit(searcher: Searcher) -> None:
    with pytest.raises(QueryLimitError, match="memory limit of 64MB"):
        run_sql(
            searcher,
            "SELECT count(DISTINCT range) FROM range(100000000)",
            principal=MERIDIAN,
            memory_limit="64MB",
        )


def test_sql_limits_are_set_and_locked(searcher: Searcher) -> None:
    result = run_sql(
        searcher,
        "SELECT current_setting('memory_limit'), current_setting('threads'), "
        "current_setting('lock_configuration'), current_setting('temp_directory')",
        principal=MERIDIAN,
        memory_limit="256MB",
        threads=1,
    )
    memory, threads, locked, temp = result.rows[0]
    assert "MiB" in str(memory) and float(str(memory).split()[0]) < 256
    assert (int(threads), locked, temp) == (1, True, "")


@pytest.mark.parametrize(
    "limits",
    [{"timeout_s": float("nan")}, {"timeout_s": 0.0}, {"memory_limit": "lots"}, {"threads": 0}],
)
def test_sql_limits_are_checked(searcher: Searcher, limits: dict[str, Any]) -> None:
    with pytest.raises(InvalidQueryError, match="SQL"):
        run_sql(searcher, "SELECT 1", principal=MERIDIAN, **limits)
