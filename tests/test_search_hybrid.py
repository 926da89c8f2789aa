"""Dense, lexical and hybrid search through real LanceDB generations (hash embedder).

The expected results come from oracles computed outside the search code: the generation's rows
read directly, the fusion formulas applied to the two single-retriever rankings, regexes over
the indexed text.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import yaml
from click.testing import CliRunner
from lancedb.index import FTS

from corpus_index import fusion
from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.errors import (
    DimensionMismatchError,
    InvalidFilterError,
    InvalidQueryError,
    MissingIndexError,
)
from corpus_index.filters import Condition, CorpusFilter, Geo
from corpus_index.home import Home
from corpus_index.index_store import vector_entry_schema
from corpus_index.retrieval import SECTION_CONTEXT
from corpus_index.retrieval_settings import DEFAULT_RETRIEVAL
from corpus_index.search import Hit, Principal, Searcher, block_order
from tests.corpusgen import deal_text, write_home
from tests.searchkit import (
    Doc,
    active,
    all_rows,
    build_home,
    sample_config,
    scratch_home,
    write_generation,
)

MERIDIAN = Principal("meridian", ("uw-team", "credit-committee"))
MERIDIAN_UW = Principal("meridian", ("uw-team",))
HARBOR = Principal("harbor", ("harbor-analysts", "harbor-credit"))
MODES = ["dense", "lexical", "hybrid"]
EVERYTHING = {"k": 500, "candidates": 500, "dedupe": False, "per_doc_cap": None}


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Home:
    root = tmp_path_factory.mktemp("sample")
    return build_home(Settings(config_path=sample_config(root), home=root / "home"))


@pytest.fixture(scope="module")
def searcher(sample: Home) -> Searcher:
    return Searcher(sample)


@pytest.fixture(scope="module")
def rows(sample: Home) -> list[dict[str, Any]]:
    return all_rows(sample)


def visible(rows: list[dict[str, Any]], p: Principal) -> list[dict[str, Any]]:
    return [r for r in rows if r["tenant_id"] == p.tenant and set(r["acl_groups"]) & set(p.groups)]


def refs(hits: Sequence[Hit]) -> list[str]:
    return [h.provenance.chunk_ref for h in hits]


# -- scope ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "principal", [MERIDIAN, MERIDIAN_UW, HARBOR], ids=lambda p: "/".join(p.groups)
)
def test_every_mode_returns_only_rows_the_principal_may_see(
    searcher: Searcher, rows: list[dict[str, Any]], mode: str, principal: Principal
) -> None:
    allowed = {r["chunk_ref"] for r in visible(rows, principal)}
    result = searcher.search(
        "insurance premiums and deferred maintenance", principal=principal, mode=mode, **EVERYTHING
    )
    assert result.hits, "the query shares words with every tenant's deals"
    assert set(refs(result.hits)) <= allowed
    if mode == "dense":  # exact search inside the prefilter returns every eligible row
        assert set(refs(result.hits)) == allowed


def test_narrowed_acl_rows_need_their_group(searcher: Searcher, rows: list[dict[str, Any]]) -> None:
    narrowed = {r["chunk_ref"] for r in rows if r["acl_groups"] == ["credit-committee"]}
    assert narrowed, "the sample corpus restricts some deals to credit-committee"
    for mode in MODES:
        hits = searcher.search(
            "grocery anchored retail hotel", principal=MERIDIAN_UW, mode=mode, **EVERYTHING
        ).hits
        assert not set(refs(hits)) & narrowed
        hits = searcher.search(
            "grocery anchored retail hotel", principal=MERIDIAN, mode=mode, **EVERYTHING
        ).hits
        assert set(refs(hits)) & narrowed


# -- lexical ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "regex", "principal"),
    [
        ("Lowry", r"\blowry\b", HARBOR),
        ("boilers", r"\bboilers?\b", MERIDIAN),  # the index stems: boilers ~ boiler
        ("windstorm", r"\bwindstorms?\b", MERIDIAN),
    ],
)
def test_lexical_finds_exactly_the_rows_holding_a_word(
    searcher: Searcher, rows: list[dict[str, Any]], word: str, regex: str, principal: Principal
) -> None:
    pattern = re.compile(regex, re.IGNORECASE)
    expected = {r["chunk_ref"] for r in visible(rows, principal) if pattern.search(r["text"])}
    assert expected, f"{word!r} should occur in the sample corpus"
    hits = searcher.search(word, principal=principal, mode="lexical", **EVERYTHING).hits
    assert set(refs(hits)) == expected
    assert all(h.scores["lexical"] > 0 and h.score == h.scores["lexical"] for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_lexical_never_crosses_tenants(searcher: Searcher) -> None:
    # "Lowry" occurs only in a harbor deal: meridian, even with every group, finds nothing
    assert searcher.search("Lowry", principal=MERIDIAN, mode="lexical").hits == []
    assert searcher.search("Lowry", principal=HARBOR, mode="lexical").hits


# -- fusion inside the searcher ---------------------------------------------------------------


QUERIES = ["roof replacement capital plan", "hurricane insurance", "anchor tenant lease expiring"]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("rrf_k", [60, 1])
def test_hybrid_is_the_rrf_of_the_two_rankings(searcher: Searcher, query: str, rrf_k: int) -> None:
    # candidates cover every row, so ties at the depth boundary cannot change the sets
    opts: dict[str, Any] = {
        "principal": MERIDIAN,
        "candidates": 500,
        "dedupe": False,
        "per_doc_cap": None,
    }
    dense = searcher.search(query, mode="dense", k=500, **opts).hits
    lexical = searcher.search(query, mode="lexical", k=500, **opts).hits
    assert dense and lexical
    expected = fusion.reciprocal_rank_fusion(
        {"dense": refs(dense), "lexical": refs(lexical)}, k=rrf_k
    )
    rrf = {"fusion_method": "rrf", "feedback": False}
    hybrid = searcher.search(query, mode="hybrid", k=10, rrf_k=rrf_k, **rrf, **opts).hits
    assert len(hybrid) == 10
    assert [h.score for h in hybrid] == [
        round(s, 6) for s in sorted(expected.values(), reverse=True)[:10]
    ]
    for h in hybrid:
        assert h.score == round(expected[h.provenance.chunk_ref], 6)
        in_dense = h.provenance.chunk_ref in refs(dense)
        in_lexical = h.provenance.chunk_ref in refs(lexical)
        assert ("dense" in h.ranks) == in_dense and ("lexical" in h.ranks) == in_lexical
        if in_dense:
            assert h.ranks["dense"] == refs(dense).index(h.provenance.chunk_ref) + 1
    # ties are broken the same way every time
    again = searcher.search(query, mode="hybrid", k=10, rrf_k=rrf_k, **rrf, **opts).hits
    assert refs(again) == refs(hybrid)


def test_hybrid_weights_shift_the_ranking(searcher: Searcher) -> None:
    opts: dict[str, Any] = {
        "principal": MERIDIAN,
        "k": 5,
        "dedupe": False,
        "per_doc_cap": None,
        "feedback": False,
    }
    query = "roof replacement capital plan"
    dense_only = searcher.search(query, mode="hybrid", weights=(1.0, 0.0), **opts).hits
    lexical_only = searcher.search(query, mode="hybrid", weights=(0.0, 1.0), **opts).hits
    assert refs(dense_only) == refs(searcher.search(query, mode="dense", **opts).hits)
    assert refs(lexical_only)[:3] == refs(searcher.search(query, mode="lexical", **opts).hits)[:3]


@pytest.mark.parametrize("weights", [(1.0, 1.0), (0.8, 0.2)])
def test_weighted_fusion_of_min_max_scores(
    searcher: Searcher, weights: tuple[float, float]
) -> None:
    opts: dict[str, Any] = {
        "principal": HARBOR,
        "candidates": 500,
        "dedupe": False,
        "per_doc_cap": None,
    }
    query = "street rates self storage"
    dense = searcher.search(query, mode="dense", k=500, **opts).hits
    lexical = searcher.search(query, mode="lexical", k=500, **opts).hits
    expected = fusion.weighted_fusion(
        {
            "dense": {h.provenance.chunk_ref: h.scores["dense"] for h in dense},
            "lexical": {h.provenance.chunk_ref: h.scores["lexical"] for h in lexical},
        },
        weights={"dense": weights[0], "lexical": weights[1]},
    )
    hybrid = searcher.search(
        query,
        mode="hybrid",
        k=8,
        fusion_method="weighted",
        weights=weights,
        feedback=False,
        **opts,
    ).hits
    assert [h.score for h in hybrid] == [
        round(s, 6) for s in sorted(expected.values(), reverse=True)[:8]
    ]


def _scores(hits: Sequence[Hit], key: str) -> dict[str, float]:
    return {h.provenance.chunk_ref: h.scores[key] for h in hits}


@pytest.mark.parametrize("depth", [500, 5])
def test_zscore_fusion_of_the_two_lists(searcher: Searcher, depth: int) -> None:
    """Oracle: ``z_fusion`` of the single-retriever lists. A BM25 list shorter than the depth
    asked for holds every matching row (the rest score 0: ``complete``); a full one may not."""
    opts: dict[str, Any] = {"principal": HARBOR, "k": depth, "candidates": depth}
    opts |= {"dedupe": False, "per_doc_cap": None}
    query = "street rates self storage"
    dense = searcher.search(query, mode="dense", **opts).hits
    lexical = searcher.search(query, mode="lexical", **opts).hits
    complete = len(lexical) < depth
    assert complete == (depth == 500)  # the sample has fewer than 500 matches, more than 5
    expected = fusion.z_fusion(
        {"dense": _scores(dense, "dense"), "lexical": _scores(lexical, "lexical")},
        weights={"dense": 1.0, "lexical": 0.5},
        complete=("lexical",) if complete else (),
    )
    hybrid = searcher.search(
        query, mode="hybrid", fusion_method="zscore", weights=(1.0, 0.5), feedback=False, **opts
    ).hits
    top = sorted(expected.values(), reverse=True)[: min(10, depth)]
    assert [h.score for h in hybrid[:10]] == [round(v, 6) for v in top]


def _stored(sample: Home) -> dict[str, dict[str, Any]]:
    table = sample.store.table(active(sample))
    rows = table.to_arrow().select(["chunk_ref", "source_id", "vector"]).to_pylist()
    return {r["chunk_ref"]: r for r in rows}


def _after_feedback(
    searcher: Searcher, query: str, fb: np.ndarray, opts: dict[str, Any]
) -> dict[str, float]:
    """The second round by hand: the query moved by Rocchio towards ``fb``, dense search with
    the moved vector, z-fused with the BM25 list (complete: the sample has < 500 matches)."""
    qvec = searcher.embed_query(query, active(searcher.corpus))
    moved = qvec + DEFAULT_RETRIEVAL.feedback_beta * fb
    moved = moved / np.linalg.norm(moved)
    dense = searcher.search(query, mode="dense", vector=moved, **opts).hits
    lexical = searcher.search(query, mode="lexical", **opts).hits
    assert len(lexical) < opts["candidates"]
    return fusion.z_fusion(
        {"dense": _scores(dense, "dense"), "lexical": _scores(lexical, "lexical")},
        complete=("lexical",),
    )


def test_default_hybrid_runs_one_rocchio_round_from_the_top_document(
    searcher: Searcher, sample: Home
) -> None:
    """Oracle: the z-fused top candidate's document, the unit mean of its rows among the
    first round's candidates (here every row the principal sees, computed from the table),
    moves the query (Rocchio); a dense search with the moved vector, z-fused again with BM25."""
    opts: dict[str, Any] = {"principal": MERIDIAN, **EVERYTHING}
    query = "roof replacement capital plan"
    first = searcher.search(query, mode="hybrid", feedback=False, **opts).hits
    stored = _stored(sample)
    doc = first[0].source_id
    rows = [r["vector"] for r in stored.values() if r["source_id"] == doc]
    assert len(rows) > 1  # a deal has several sections: the document is not its top row
    centroid = np.mean(np.asarray(rows, dtype=np.float32), axis=0)
    expected = _after_feedback(searcher, query, centroid / np.linalg.norm(centroid), opts)
    hybrid = searcher.search(query, mode="hybrid", **opts)
    assert hybrid.trace["feedback"] == {
        "docs": 1,
        "beta": DEFAULT_RETRIEVAL.feedback_beta,
        "from": "document",
    }
    top10 = sorted(expected.values(), reverse=True)[:10]
    assert [h.score for h in hybrid.hits[:10]] == pytest.approx(
        [round(v, 6) for v in top10], abs=2e-6
    )
    # the round changed the dense side, so the fused scores are not the first round's
    assert [h.score for h in hybrid.hits] != [h.score for h in first]


def test_feedback_from_chunk_uses_the_top_row_alone(searcher: Searcher, sample: Home) -> None:
    opts: dict[str, Any] = {"principal": MERIDIAN, **EVERYTHING}
    query = "roof replacement capital plan"
    first = searcher.search(query, mode="hybrid", feedback=False, **opts).hits
    top = np.asarray(_stored(sample)[first[0].provenance.chunk_ref]["vector"], dtype=np.float32)
    expected = _after_feedback(searcher, query, top, opts)
    default = searcher.corpus.config.namespaces["deals"]
    try:
        searcher.corpus.config.namespaces["deals"] = dataclasses.replace(
            default, retrieval=dataclasses.replace(DEFAULT_RETRIEVAL, feedback_from="chunk")
        )
        hybrid = searcher.search(query, mode="hybrid", **opts)
    finally:
        searcher.corpus.config.namespaces["deals"] = default
    assert hybrid.trace["feedback"]["from"] == "chunk"
    top10 = sorted(expected.values(), reverse=True)[:10]
    assert [h.score for h in hybrid.hits[:10]] == pytest.approx(
        [round(v, 6) for v in top10], abs=2e-6
    )
    from_document = searcher.search(query, mode="hybrid", **opts).hits
    assert [h.score for h in hybrid.hits] != [h.score for h in from_document]


def test_a_namespace_override_declared_in_corpus_yaml_is_its_default(
    sample: Home, tmp_path: Path
) -> None:
    config = yaml.safe_load(sample.settings.config_path.read_text())
    config["namespaces"]["deals"]["retrieval"] = {"fusion": "rrf", "feedback_docs": 0}
    path = tmp_path / "corpus.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    tuned = Searcher(Home(Settings(config_path=path, home=sample.settings.home)))
    opts: dict[str, Any] = {"principal": MERIDIAN, **EVERYTHING}
    query = "hurricane insurance"
    got = tuned.search(query, mode="hybrid", **opts)
    assert got.trace["fusion"] == "rrf" and "feedback" not in got.trace
    explicit = Searcher(sample).search(
        query, mode="hybrid", fusion_method="rrf", feedback=False, **opts
    )
    assert [(h.provenance.chunk_ref, h.score) for h in got.hits] == [
        (h.provenance.chunk_ref, h.score) for h in explicit.hits
    ]
    listed = CliRunner().invoke(
        main,
        ["--config", str(path), "--home", str(sample.settings.home), "generations", "--json"],
    )
    assert listed.exit_code == 0, listed.output
    shown = json.loads(listed.output)["retrieval"]["deals"]
    assert shown["fusion"] == "rrf" and shown["feedback_docs"] == 0 and shown["declared"] is True


# -- dedupe and per-document cap --------------------------------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Home:
    """Two tenants, 3 deals each; a tenant's deals share identical market and sponsor blocks.

    Plus one deal whose risk_assessment has three blocks, and a paragraph-granularity section.
    """
    root = tmp_path_factory.mktemp("generated")
    config = write_home(root)
    text = deal_text("DEAL-ALPHA-BIG", tenant="alpha", acl=["alpha-uw"], units=500)
    extra = (
        "## risk_assessment\n```yaml\nnote: First block about the zoning variance hearing.\n```\n"
        "```yaml\nnote: Second block about the elevator modernization backlog.\n```\n"
        "```yaml\nnote: Third block about the parking structure repairs.\n```\n"
        "## property\n```yaml\nhistory: |\n  Built in 1962 as a hosiery mill.\n\n"
        "  Converted to lofts in 2004.\n\n  Courtyard pool added in 2019.\n```\n"
    )
    (root / "sources" / "alpha" / "deal-alpha-big.uw.md").write_text(text + "\n" + extra)
    import yaml

    doc = yaml.safe_load(config.read_text())
    doc["sections"] = {
        "market_analysis": {"granularity": "block"},
        "risk_assessment": {"granularity": "block"},
        "borrower_sponsor": {"granularity": "block"},
        "property": {"granularity": "paragraph"},
    }
    config.write_text(yaml.safe_dump(doc))
    return build_home(Settings(config_path=config, home=root / "home"))


ALPHA = Principal("alpha", ("alpha-uw", "alpha-credit"))


def test_dedupe_by_content_hash(generated: Home) -> None:
    s = Searcher(generated)
    query = "Rents grew four percent last year on steady job growth"
    raw = s.search(
        query, principal=ALPHA, mode="lexical", k=50, dedupe=False, per_doc_cap=None
    ).hits
    market = [h for h in raw if h.section == "market_analysis"]
    assert len(market) == 4  # the same block in all four alpha deals
    assert len({h.provenance.content_hash for h in market}) == 1
    deduped = s.search(query, principal=ALPHA, mode="lexical", k=50, per_doc_cap=None).hits
    assert [h for h in deduped if h.section == "market_analysis"] == [market[0]]
    hashes = [
        (h.provenance.content_hash, h.provenance.chunk_ref.partition("#")[2]) for h in deduped
    ]
    assert len(hashes) == len(set(hashes))


def test_paragraphs_of_one_block_are_not_collapsed_by_dedupe(generated: Home) -> None:
    hits = (
        Searcher(generated)
        .search(
            "hosiery mill lofts courtyard pool",
            principal=ALPHA,
            mode="lexical",
            k=20,
            per_doc_cap=None,
        )
        .hits
    )
    paragraphs = [
        h for h in hits if h.source_id.endswith("deal-alpha-big") and h.section == "property"
    ]
    assert len(paragraphs) >= 2  # same content_hash, different paragraphs
    assert len({h.provenance.content_hash for h in paragraphs}) == 1


@pytest.mark.parametrize("cap", [1, 2, 3])
def test_per_document_cap(searcher: Searcher, cap: int) -> None:
    query = "roof insurance tenant lease sponsor market"
    uncapped = searcher.search(query, principal=MERIDIAN, k=100, per_doc_cap=None).hits
    assert max(Counter(h.source_id for h in uncapped).values()) > cap  # the cap has work to do
    capped = searcher.search(query, principal=MERIDIAN, k=100, per_doc_cap=cap).hits
    counts = Counter(h.source_id for h in capped)
    assert max(counts.values()) == cap
    # the cap keeps each document's best hits, in the uncapped order
    for source in counts:
        mine = [h.provenance.chunk_ref for h in uncapped if h.source_id == source][:cap]
        assert [h.provenance.chunk_ref for h in capped if h.source_id == source] == mine


# -- parent expansion -------------------------------------------------------------------------


def test_expand_section_returns_every_block_in_order(generated: Home) -> None:
    [hit] = (
        Searcher(generated)
        .search(
            "elevator modernization backlog", principal=ALPHA, mode="lexical", k=1, expand="section"
        )
        .hits
    )
    assert hit.block_key == "risk_assessment/2"  # the deal generator's block comes first
    keys = [c.block_key for c in hit.context]
    assert keys == [
        "risk_assessment/0",
        "risk_assessment/1",
        "risk_assessment/2",
        "risk_assessment/3",
    ]
    assert [c.is_hit for c in hit.context] == [False, False, True, False]
    assert "parking structure" in hit.context[3].text


@pytest.mark.parametrize(
    ("query", "window", "expected"),
    [
        (
            "elevator modernization backlog",
            1,
            ["risk_assessment/1", "risk_assessment/2", "risk_assessment/3"],
        ),
        ("parking structure repairs", 1, ["risk_assessment/2", "risk_assessment/3"]),
        ("zoning variance hearing", 0, ["risk_assessment/1"]),
        # paragraphs: the generator's property block (2 paragraphs) comes before ours (3)
        ("hosiery mill", 1, ["property/0#p1", "property/1#p0", "property/1#p1"]),
        ("courtyard pool", 1, ["property/1#p1", "property/1#p2"]),
        (
            "courtyard pool",
            9,
            ["property/0#p0", "property/0#p1", "property/1#p0", "property/1#p1", "property/1#p2"],
        ),
    ],
)
def test_expand_neighbours(generated: Home, query: str, window: int, expected: list[str]) -> None:
    [hit] = (
        Searcher(generated)
        .search(query, principal=ALPHA, mode="lexical", k=1, expand="neighbours", window=window)
        .hits
    )
    assert [c.block_key for c in hit.context if c.section == hit.section] == expected


LONG_SECTION = 1200  # longer than the 1,000 rows expansion used to read in scan order


@pytest.fixture(scope="module")
def long_section(tmp_path_factory: pytest.TempPathFactory) -> tuple[Home, str]:
    """One document whose ``body`` section has LONG_SECTION chunks, the marker five from the
    end; returns the home and the generation id."""
    corpus = scratch_home(tmp_path_factory.mktemp("long"), {"alpha": ["a1"]})
    gen = corpus.registry.open_generation(corpus.spec("main"))
    [base] = write_generation(
        corpus, gen, [Doc("alpha-deals", "alpha", ("a1",), "long", (("body", "x"),))]
    )
    rows = []
    for i in range(LONG_SECTION):
        text = "zebra unicorn marker" if i == LONG_SECTION - 5 else f"ordinary paragraph {i}"
        rows.append({**base, "vector_id": f"v{i:06d}", "block_key": f"body/{i}", "text": text,
                     "chunk_ref": f"chunk://alpha-deals/long/v0/body/{i}",
                     "content_hash": f"sha256:{i:064d}"})  # fmt: skip
    vectors = corpus.embedder(gen.spec.profile).embed([r["text"] for r in rows])
    table = pa.Table.from_pylist(
        [{**r, "vector": v.tolist()} for r, v in zip(rows, vectors, strict=True)],
        schema=vector_entry_schema(gen),
    )
    lance_table = corpus.store.db.create_table(gen.table_name, table, mode="overwrite")
    lance_table.create_index("text", config=FTS(with_position=False), replace=True)
    return corpus, gen.id


@pytest.mark.parametrize(
    ("how", "first", "last"),
    [
        ("neighbours", LONG_SECTION - 6, LONG_SECTION - 4),
        ("section", LONG_SECTION - 5 - SECTION_CONTEXT, LONG_SECTION - 1),
    ],
)
def test_expansion_of_a_hit_deep_in_a_long_section_is_around_the_hit(
    long_section: tuple[Home, str], how: str, first: int, last: int
) -> None:
    corpus, gen = long_section
    [hit] = (
        Searcher(corpus)
        .search(
            "zebra unicorn marker",
            principal=Principal("alpha", ("a1",)),
            k=1,
            mode="lexical",
            generation=gen,
            expand=how,
            window=1,
        )  # fmt: skip
        .hits
    )
    assert hit.block_key == f"body/{LONG_SECTION - 5}"
    # the section's chunks are read by their place, not the first 1,000 in scan order (which
    # held neither the hit nor its neighbours); a section returns at most SECTION_CONTEXT
    # either side of the hit
    assert [c.block_key for c in hit.context] == [f"body/{i}" for i in range(first, last + 1)]
    assert [c.block_key for c in hit.context if c.is_hit] == [hit.block_key]


def test_block_order() -> None:
    keys = ["s/10", "s/2#p1", "s/2", "s/2#p0", "s/1"]
    assert sorted(keys, key=block_order) == ["s/1", "s/2", "s/2#p0", "s/2#p1", "s/10"]


# -- filters in the search --------------------------------------------------------------------


FILTERS: list[tuple[str, Any, Any]] = [
    (
        "asset class",
        CorpusFilter(asset_class="multifamily"),
        lambda r: r["asset_class"] == "multifamily",
    ),
    (
        "several classes and a size",
        CorpusFilter(asset_class=("retail", "industrial"), size_units_range=(10, 30)),
        lambda r: r["asset_class"] in ("retail", "industrial") and 10 <= r["units"] <= 30,
    ),
    ("geo", CorpusFilter(geo=Geo(state="AZ")), lambda r: r["state"] == "AZ"),
    (
        "dates",
        CorpusFilter(date_range=("2025-01-01", "2025-12-31")),
        lambda r: "2025-01-01" <= r["deal_date"] <= "2025-12-31",
    ),
    (
        "generic",
        [Condition("section", "=", "risk_assessment")],
        lambda r: r["section"] == "risk_assessment",
    ),
    (
        "mapping",
        {"metro": ["Phoenix", "Atlanta"], "units": {">": 100}},
        lambda r: r["metro"] in ("Phoenix", "Atlanta") and r["units"] > 100,
    ),
    ("nothing matches", CorpusFilter(geo=Geo(metro="Atlantis")), lambda r: False),
]


@pytest.mark.parametrize(("case", "spec", "keep"), FILTERS, ids=[f[0] for f in FILTERS])
@pytest.mark.parametrize("mode", MODES)
def test_filters_select_exactly_the_matching_rows(
    searcher: Searcher, rows: list[dict[str, Any]], case: str, spec: Any, keep: Any, mode: str
) -> None:
    expected = {r["chunk_ref"] for r in visible(rows, MERIDIAN) if keep(r)}
    hits = searcher.search(
        "capital repairs insurance tenant",
        principal=MERIDIAN,
        mode=mode,
        filters=spec,
        **EVERYTHING,
    ).hits
    assert set(refs(hits)) <= expected
    if mode == "dense":
        assert set(refs(hits)) == expected
    if expected and mode != "lexical":
        assert hits


def test_unknown_filter_key_is_a_clean_error(searcher: Searcher) -> None:
    with pytest.raises(InvalidFilterError, match="unknown filter key 'colour'"):
        searcher.search("x", principal=MERIDIAN, filters={"colour": "red"})


# -- rerank -----------------------------------------------------------------------------------


class WordCountReranker:
    """Deterministic stand-in for a cross-encoder: counts one word in each passage."""

    def __init__(self, word: str) -> None:
        self.word = word
        self.name = f"word-count:{word}"
        self.calls: list[int] = []

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        self.calls.append(len(texts))
        return [float(t.lower().count(self.word)) - i * 1e-6 for i, t in enumerate(texts)]


def test_rerank_reorders_the_candidates(searcher: Searcher, rows: list[dict[str, Any]]) -> None:
    reranker = WordCountReranker("insurance")
    plain = searcher.search("property insurance premiums", principal=MERIDIAN, k=5).hits
    result = searcher.search(
        "property insurance premiums", principal=MERIDIAN, k=5, rerank=reranker, rerank_depth=40
    )
    assert reranker.calls == [40]
    counts = [h.excerpt.lower().count("insurance") for h in result.hits]
    assert counts == sorted(counts, reverse=True)
    assert [h.ranks["rerank"] for h in result.hits] == [1, 2, 3, 4, 5]
    assert all("rerank" in h.scores and h.score == h.scores["rerank"] for h in result.hits)
    assert refs(result.hits) != refs(plain)
    assert result.trace["rerank"] == "word-count:insurance" and result.trace["rerank_ms"] >= 0
    allowed = {r["chunk_ref"] for r in visible(rows, MERIDIAN)}
    assert set(refs(result.hits)) <= allowed


def test_rerank_depth_below_k_keeps_the_rest_in_fused_order(searcher: Searcher) -> None:
    plain = searcher.search("property insurance premiums", principal=MERIDIAN, k=10).hits
    reranker = WordCountReranker("insurance")
    result = searcher.search(
        "property insurance premiums", principal=MERIDIAN, k=10, rerank=reranker, rerank_depth=4
    ).hits
    assert reranker.calls == [4] and len(plain) == 10
    # the reranked head is the fused top 4 in another order; the 6 after it were dropped
    assert sorted(refs(result[:4])) == sorted(refs(plain[:4]))
    assert refs(result[4:]) == refs(plain[4:])
    assert all("rerank" not in h.ranks for h in result[4:])


def test_rerank_needs_text(searcher: Searcher, sample: Home) -> None:
    vec = np.ones(active(sample).spec.dim, dtype=np.float32)
    with pytest.raises(InvalidQueryError, match="reranking needs query text"):
        searcher.search("", principal=MERIDIAN, vector=vec, rerank=WordCountReranker("x"))


def test_cross_encoder_needs_a_local_model_folder(tmp_path: Path) -> None:
    from corpus_index.errors import ConfigError
    from corpus_index.rerank import make_reranker

    assert make_reranker(None) is None and make_reranker("") is None
    with pytest.raises(ConfigError, match="not a local model folder"):
        make_reranker(str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="config.json"):
        make_reranker(f"cross-encoder:{tmp_path}")


# -- vectors, options, errors, trace ----------------------------------------------------------


def test_query_by_vector_equals_query_by_its_text(searcher: Searcher, sample: Home) -> None:
    gen = active(sample)
    vec = searcher.embed_query("hurricane insurance", gen)
    by_text = searcher.search("hurricane insurance", principal=HARBOR, mode="dense", k=8)
    by_vector = searcher.search("", principal=HARBOR, mode="dense", k=8, vector=vec)
    assert refs(by_vector.hits) == refs(by_text.hits)
    with pytest.raises(DimensionMismatchError, match="has 256"):
        searcher.search("", principal=HARBOR, vector=np.ones(3, np.float32))
    with pytest.raises(InvalidQueryError, match="finite"):
        searcher.search("", principal=HARBOR, vector=np.zeros(gen.spec.dim, np.float32))


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"mode": "fuzzy"}, "unknown search mode"),
        ({"fusion_method": "borda"}, "unknown fusion"),
        ({"expand": "document"}, "unknown expansion"),
        ({"k": 0}, "k must be"),
        ({"k": 10, "candidates": 5}, "candidates"),
        # past LanceDB's u32 limit these were a raw OverflowError
        ({"k": 2**31}, "k must be between 1 and 10,000"),
        ({"k": 10**12, "mode": "dense"}, "k must be between 1 and 10,000"),
        ({"k": 10, "candidates": 10**10}, "at most 10,000 rows"),
        ({"per_doc_cap": 0}, "per-document cap"),
        ({"weights": (0.0, 0.0)}, "fusion weights"),
        ({"weights": (-1.0, 1.0)}, "fusion weights"),
    ],
)
def test_bad_options_are_clean_errors(
    searcher: Searcher, kwargs: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(InvalidQueryError, match=fragment):
        searcher.search("roof", principal=MERIDIAN, **kwargs)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("query", ["", "   \n\t"])
def test_empty_query_is_refused(searcher: Searcher, mode: str, query: str) -> None:
    with pytest.raises(InvalidQueryError, match="empty"):
        searcher.search(query, principal=MERIDIAN, mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("query", ["roof \udcff", "\ud800"])
def test_a_lone_surrogate_in_the_query_is_refused_with_its_position(
    searcher: Searcher, mode: str, query: str
) -> None:
    # what Python makes of a non-UTF-8 byte in argv: the embedder and the FTS engine could
    # not encode it and failed with a raw UnicodeEncodeError
    with pytest.raises(InvalidQueryError, match=f"at position {len(query) - 1}"):
        searcher.search(query, principal=MERIDIAN, mode=mode)


def test_trace_times_every_stage(searcher: Searcher) -> None:
    result = searcher.search("roof replacement", principal=MERIDIAN, k=3, expand="section")
    t = result.trace
    for stage in (
        "resolve",
        "filter",
        "embedding",
        "retrieval",
        "dense",
        "lexical",
        "fusion",
        "feedback",
        "dedupe",
        "rerank",
        "expand",
        "total",
    ):
        assert isinstance(t[f"{stage}_ms"], float) and t[f"{stage}_ms"] >= 0, stage
    # the default hybrid is the namespace's retrieval settings (none declared: the one default)
    default = searcher.corpus.config.namespaces["deals"].retrieval
    assert default == DEFAULT_RETRIEVAL and t["fusion"] == "zscore"
    assert t["feedback"] == {
        "docs": default.feedback_docs,
        "beta": default.feedback_beta,
        "from": default.feedback_from,
    }
    assert t["mode"] == "hybrid" and t["k"] == 3 and t["candidates"] == 50
    assert t["counts"]["dense"] > 0 and t["counts"]["lexical"] > 0 and t["counts"]["returned"] == 3
    # the two retrievers ran at the same time: the stage waited for the slower one only
    assert t["retrievers"] == "concurrent"
    assert t["total_ms"] >= t["retrieval_ms"] >= max(t["dense_ms"], t["lexical_ms"])
    lexical = searcher.search("roof", principal=MERIDIAN, mode="lexical").trace
    assert lexical["counts"]["dense"] == 0 and lexical["fusion"] is None


FIELD_PATH = re.compile(r"\w\[\d+\]|[A-Za-z_]\w*\.[A-Za-z_]\w*: |^[a-z_]+: ")


def test_excerpts_read_as_prose_while_fts_keeps_the_canonical_input(searcher: Searcher) -> None:
    result = searcher.search(
        "galvanized plumbing slab leaks", principal=MERIDIAN, k=5, mode="lexical"
    )
    assert result.hits
    for hit in result.hits:
        assert not FIELD_PATH.search(hit.excerpt), hit.excerpt
        assert not hit.excerpt.startswith(hit.section)
    risk = next(h for h in result.hits if h.doc_id == "deal-2026-0042")
    assert risk.section == "risk_assessment"
    assert risk.excerpt.startswith(
        "Building systems end of life. Severity: high. Domestic water supply is the original"
    )
    # what was embedded and what FTS matched is still the canonical input, paths and all
    (row,) = [r for r in all_rows(searcher.corpus) if r["chunk_ref"] == risk.provenance.chunk_ref]
    assert row["text"].startswith("risk_assessment\nflags[0].id: building_systems_end_of_life")


def test_the_original_signature_still_works(searcher: Searcher, sample: Home) -> None:
    gen = active(sample)
    result = searcher.search(
        "roof replacement", principal=MERIDIAN, k=3, namespace="deals", generation=gen.id
    )
    assert len(result.hits) == 3 and result.trace["generation"] == gen.id
    doc = result.to_json()
    hit = doc["hits"][0]
    assert set(hit) == {
        "score",
        "source_id",
        "collection",
        "tenant_id",
        "section",
        "excerpt",
        "provenance",
    }
    assert set(hit["provenance"]) == {
        "chunk_ref",
        "source_version",
        "content_hash",
        "input_format",
        "backend_spec",
        "generation",
        "run_id",
    }
    first = result.hits[0]
    assert first.deal_id and first.deal_id.startswith("DEAL-") and first.doc_id
    stages = doc["trace"]["hits"][0]  # each stage's ranks and scores live in the trace
    assert stages["chunk_ref"] == hit["provenance"]["chunk_ref"]
    assert stages["ranks"] and stages["scores"]
    json.dumps(doc)  # plain JSON all the way down


def test_lexical_without_a_full_text_index(tmp_path: Path) -> None:
    config = write_home(tmp_path)
    corpus = build_home(Settings(config_path=config, home=tmp_path / "home"))
    corpus.store.table(active(corpus)).drop_index("text_idx")
    s = Searcher(corpus)
    p = Principal("alpha", ("alpha-uw",))
    with pytest.raises(MissingIndexError, match="no full-text index"):
        s.search("roofs", principal=p, mode="lexical")
    result = s.search("roofs", principal=p, mode="hybrid")
    assert result.hits and result.trace["lexical_skipped"] == "no full-text index"


# -- the CLI ----------------------------------------------------------------------------------


def cli(corpus: Home, *args: str) -> Any:
    base = ["--config", str(corpus.settings.config_path), "--home", str(corpus.settings.home)]
    return CliRunner().invoke(main, [*base, *args])


def test_cli_search_modes_filters_and_trace(sample: Home, rows: list[dict[str, Any]]) -> None:
    out = cli(
        sample,
        "search",
        "insurance",
        "--tenant", "meridian",
        "--group", "uw-team",
        "--mode", "lexical",
        "--filter", "asset_class=multifamily,retail",
        "--filter", "units>=20",
        "--k", "50",
        "--per-doc", "0",
        "--no-dedupe",
        "--json",
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    expected = {
        r["chunk_ref"]
        for r in visible(rows, MERIDIAN_UW)
        if r["asset_class"] in ("multifamily", "retail")
        and r["units"] >= 20
        and re.search(r"\binsurance\b", r["text"], re.IGNORECASE)
    }
    assert expected and {h["provenance"]["chunk_ref"] for h in doc["hits"]} == expected
    assert doc["trace"]["mode"] == "lexical" and "lexical_ms" in doc["trace"]
    assert doc["trace"]["filters"] == [
        {"key": "asset_class", "op": "in", "value": ["multifamily", "retail"]},
        {"key": "units", "op": ">=", "value": "20"},
    ]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--filter", "colour=red"], "unknown filter key 'colour'"),
        (["--filter", "units>=lots"], "units expects an integer"),
        (["--filter", "nonsense"], "cannot read filter"),
        (["--mode", "lexical", "--rerank-model", "/no/such/model"], "not a local model folder"),
        (["--candidates", str(10**10)], "10000000000 is not in the range 1<=x<=10000"),
        # the reference time of a group-first search's time hints: this namespace has none
        (["--as-of", "2026-01-10"], "--as-of applies to a group-first search only"),
        (["--as-of", "2026-01-10"], "namespace 'deals' holds no messages"),
    ],
)
def test_cli_bad_filters_exit_2_with_a_message(
    sample: Home, args: list[str], fragment: str
) -> None:
    out = cli(sample, "search", "roof", "--tenant", "meridian", "--group", "uw-team", *args)
    assert out.exit_code == 2, out.output
    assert fragment in out.output and "Traceback" not in out.output


def test_cli_query_with_a_byte_that_is_not_utf8_exits_2_with_a_message(sample: Home) -> None:
    query = os.fsdecode(b"roof \xff")  # how such an argument reaches the command
    out = cli(sample, "search", query, "--tenant", "meridian", "--group", "uw-team", "--no-trace")
    assert out.exit_code == 2, out.output
    assert "at position 5" in out.output and "Traceback" not in out.output


def test_cli_human_output_shows_mode_and_context(sample: Home) -> None:
    out = cli(
        sample, "search", "roof replacement", "--tenant", "meridian", "--group", "uw-team",
        "--expand", "section", "--k", "2", "--no-trace",
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "hybrid" in out.output and " > [" in out.output
