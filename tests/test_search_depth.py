"""Candidate depth against dedupe and the per-document cap: each retriever returns its top
``max(5k, 50)`` rows, and dedupe and the cap run after that cut. One long document matching
everywhere, or a block repeated in many documents, fills the cut with rows they then drop, so
the search goes deeper (``search.DEPTH_GROWTH`` a round, up to ``MAX_DEPTH_FACTOR`` times) until
k hits remain or nothing more is there; HTTP pages stay at the depth page 1 used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from corpus_index.config import Settings
from corpus_index.home import Home
from corpus_index.http import create_app
from corpus_index.registry import Generation
from corpus_index.search import DEPTH_GROWTH, MAX_DEPTH_FACTOR, Principal, Searcher
from tests.searchkit import Doc, scratch_home, write_generation
from tests.support.http_server import serve_config

ALPHA = Principal("alpha", ("a1",))
MODES = ["dense", "lexical", "hybrid"]
KEY = "ck_alpha-key"


@pytest.fixture
def scratch(tmp_path: Path) -> tuple[Home, Generation]:
    corpus = scratch_home(tmp_path, {"alpha": ["a1"], "beta": ["b1"]})
    return corpus, corpus.registry.open_generation(corpus.spec("main"))


def small_docs(n: int, words: str) -> list[Doc]:
    return [
        Doc("alpha-deals", "alpha", ("a1",), f"small{i}",
            (("risk", f"{words} property number {i} with other words inside"),))
        for i in range(n)
    ]  # fmt: skip


def one_long_document(corpus: Home, gen: Generation) -> None:
    """A memo whose 60 sections all say "roof insurance" (distinct content: each section's
    hash differs), and 12 short documents that say it once among other words."""
    big = Doc("alpha-deals", "alpha", ("a1",), "big",
              tuple((f"s{i:03d}", "roof insurance") for i in range(60)))  # fmt: skip
    write_generation(corpus, gen, [big, *small_docs(12, "roof insurance")])


@pytest.mark.parametrize("mode", MODES)
def test_one_long_document_does_not_starve_the_per_document_cap(
    scratch: tuple[Home, Generation], mode: str
) -> None:
    corpus, gen = scratch
    one_long_document(corpus, gen)
    result = Searcher(corpus).search(
        "roof insurance", principal=ALPHA, k=10, mode=mode, generation=gen.id
    )
    # 13 visible matching documents: 3 chunks of the memo (the cap) and 7 others fill k=10
    assert len(result.hits) == 10, result.trace["counts"]
    assert sum(h.doc_id == "big" for h in result.hits) == 3
    assert result.trace["candidates"] == 50 * DEPTH_GROWTH
    assert result.trace["deepened"] == {"from": 50, "rounds": 1}


@pytest.mark.parametrize("mode", MODES)
def test_repeated_boilerplate_does_not_starve_dedupe(
    scratch: tuple[Home, Generation], mode: str
) -> None:
    corpus, gen = scratch
    # the same disclaimer block in 60 memos (same section and text: same content_hash)
    boiler = [
        Doc("alpha-deals", "alpha", ("a1",), f"b{i}", (("risk", "flood zone flood zone disclaimer"),))
        for i in range(60)
    ]  # fmt: skip
    write_generation(corpus, gen, [*boiler, *small_docs(12, "flood zone")])
    result = Searcher(corpus).search(
        "flood zone", principal=ALPHA, k=10, mode=mode, generation=gen.id
    )
    # the disclaimer once and 12 distinct documents are visible and match
    assert len(result.hits) == 10, result.trace["counts"]
    assert result.trace["deepened"]["from"] == 50


def test_the_search_goes_no_deeper_than_its_bound_nor_a_depth_given(
    scratch: tuple[Home, Generation],
) -> None:
    corpus, gen = scratch
    # 4 documents, one of 1,000 rows near the query: k=10 with one hit per document never
    # fills, and the dense retriever always comes back full, so only the bound stops it
    big = Doc("alpha-deals", "alpha", ("a1",), "big",
              tuple((f"s{i:04d}", f"roof insurance clause {i}") for i in range(1000)))  # fmt: skip
    write_generation(corpus, gen, [big, *small_docs(3, "roof insurance")])
    result = Searcher(corpus).search(
        "roof insurance", principal=ALPHA, k=10, mode="dense", generation=gen.id, per_doc_cap=1
    )
    assert len(result.hits) < 10
    assert result.trace["candidates"] == 50 * MAX_DEPTH_FACTOR
    assert result.trace["deepened"] == {"from": 50, "rounds": 2}
    given = Searcher(corpus).search(
        "roof insurance", principal=ALPHA, k=10, mode="dense", generation=gen.id, per_doc_cap=1,
        candidates=50,
    )  # fmt: skip
    assert given.trace["candidates"] == 50 and "deepened" not in given.trace
    enough = Searcher(corpus).search("roof insurance", principal=ALPHA, k=1, generation=gen.id)
    assert enough.trace["candidates"] == 50 and "deepened" not in enough.trace


def test_http_pages_stay_at_the_depth_page_one_went_to(scratch: tuple[Home, Generation]) -> None:
    corpus, gen = scratch
    one_long_document(corpus, gen)
    serve_config(corpus.settings.config_path, {KEY: ("alpha", ["a1"])})
    settings = Settings(config_path=corpus.settings.config_path, home=corpus.settings.home)
    body = {"query": "roof insurance", "generation": gen.id, "mode": "lexical", "k": 4}
    headers = {"Authorization": f"Bearer {KEY}"}
    with TestClient(create_app(settings, record_traces=False)) as client:

        def page(**extra: Any) -> dict[str, Any]:
            resp = client.post(
                "/v1/namespaces/deals/search", json={**body, **extra}, headers=headers
            )
            assert resp.status_code == 200, resp.text
            doc: dict[str, Any] = resp.json()
            return doc

        whole = page(k=12)
        first = page()
        second = page(cursor=first["next_cursor"])
        third = page(cursor=second["next_cursor"])
    # page 1 went deeper (at depth 50 the memo's chunks left 3 hits), and its cursor carried
    # the depth it used: the later pages ran at it, one list, no repeat, no gap
    depths = [p["trace"]["candidates"] for p in (whole, first, second, third)]
    assert depths == [60 * DEPTH_GROWTH, 50 * DEPTH_GROWTH, 50 * DEPTH_GROWTH, 50 * DEPTH_GROWTH]
    refs = [h["provenance"]["chunk_ref"] for p in (first, second, third) for h in p["hits"]]
    assert refs == [h["provenance"]["chunk_ref"] for h in whole["hits"]]
    assert len(set(refs)) == 12
