"""A hybrid search issues its dense and lexical queries at the same time, with the results of
issuing them one after the other (hash-embedder sample home, real LanceDB)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from corpus_index import retrieval
from corpus_index.config import Settings
from corpus_index.home import Home
from corpus_index.search import Principal, Searcher
from tests.searchkit import build_home, sample_config

MERIDIAN = Principal("meridian", ("uw-team", "credit-committee"))
MERIDIAN_UW = Principal("meridian", ("uw-team",))
HARBOR = Principal("harbor", ("harbor-analysts", "harbor-credit"))

QUERIES = [
    "roof replacement capital plan",
    "hurricane insurance premiums",
    "anchor tenant lease expiring next year",
    "sponsor experience with assets of this size",
    "occupancy and rent growth in the submarket",
]
OPTIONS: list[dict[str, Any]] = [
    {},  # the namespace's default: z-score fusion and one Rocchio round
    {"fusion_method": "rrf", "feedback": False},
    {"fusion_method": "weighted", "weights": (0.7, 0.3), "k": 25, "per_doc_cap": None},
    {"k": 50, "candidates": 200, "dedupe": False, "per_doc_cap": None},
    {"filters": {"units": {">": 100}}},
    {"expand": "section"},
]


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Home:
    root = tmp_path_factory.mktemp("concurrent")
    return build_home(Settings(config_path=sample_config(root), home=root / "home"))


@pytest.mark.parametrize("principal", [MERIDIAN, MERIDIAN_UW, HARBOR], ids=lambda p: p.groups[0])
def test_concurrent_hybrid_equals_sequential(sample: Home, principal: Principal) -> None:
    together = Searcher(sample)
    one_by_one = Searcher(sample, concurrent=False)
    compared = 0
    for query in QUERIES:
        for options in OPTIONS:
            a = together.search(query, principal=principal, **options)
            b = one_by_one.search(query, principal=principal, **options)
            assert a.trace["retrievers"] == "concurrent"
            assert b.trace["retrievers"] == "sequential"
            # same hits, same scores (fused and per retriever), same ranks, same order
            assert a.hits == b.hits, (query, options)
            assert a.trace["counts"] == b.trace["counts"]
            assert a.trace.get("feedback") == b.trace.get("feedback")
            compared += bool(a.hits)
    assert compared >= len(QUERIES) * len(OPTIONS) - 5  # the filter may leave a tenant nothing


def test_single_retriever_modes_do_not_use_the_pool(sample: Home) -> None:
    searcher = Searcher(sample)
    for mode in ("dense", "lexical"):
        trace = searcher.search("roof replacement", principal=MERIDIAN, mode=mode).trace
        assert trace["retrievers"] == "sequential"


def test_the_two_calls_overlap() -> None:
    # each call waits for the other to start: run one after the other, both would time out
    meet = threading.Barrier(2, timeout=10)

    def call(tag: str) -> list[dict[str, Any]]:
        meet.wait()
        return [{"by": tag, "thread": threading.get_ident()}]

    first, second = retrieval.concurrently(lambda: call("first"), lambda: call("second"))
    assert first.rows[0]["by"] == "first" and second.rows[0]["by"] == "second"
    assert first.rows[0]["thread"] == threading.get_ident() != second.rows[0]["thread"]
    assert first.ms >= 0 and second.ms >= 0


def test_an_error_on_either_side_is_raised_after_both_finished() -> None:
    finished = threading.Event()

    def slow() -> list[dict[str, Any]]:
        time.sleep(0.2)
        finished.set()
        return []

    def broken() -> list[dict[str, Any]]:
        raise ValueError("the lexical side failed")

    with pytest.raises(ValueError, match="lexical side failed"):
        retrieval.concurrently(slow, broken)

    finished.clear()

    def broken_first() -> list[dict[str, Any]]:
        raise ValueError("the dense side failed")

    with pytest.raises(ValueError, match="dense side failed"):
        retrieval.concurrently(broken_first, slow)
    assert finished.is_set()  # the other query was not left running
