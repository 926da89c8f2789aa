"""Fusion arithmetic and result shaping on hand-made rankings (no engine involved)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpus_index import fusion


def approx(x: float) -> object:
    return pytest.approx(x, rel=1e-12, abs=1e-15)


def test_rrf_by_hand() -> None:
    fused = fusion.reciprocal_rank_fusion(
        {"dense": ["a", "b", "c"], "lexical": ["c", "a", "d"]}, k=60
    )
    assert fused == {
        "a": approx(1 / 61 + 1 / 62),
        "b": approx(1 / 62),
        "c": approx(1 / 63 + 1 / 61),
        "d": approx(1 / 63),
    }
    # a (1st + 2nd) edges out c (3rd + 1st): 1/61+1/62 > 1/63+1/61
    assert fusion.ranked(fused) == ["a", "c", "b", "d"]


def test_rrf_k_changes_the_balance() -> None:
    rankings = {"dense": ["a", "b"], "lexical": ["b", "x", "y", "a"]}
    # k=0: a = 1/1 + 1/4 = 1.25, b = 1/2 + 1/1 = 1.5
    assert fusion.ranked(fusion.reciprocal_rank_fusion(rankings, k=0))[:2] == ["b", "a"]
    assert fusion.reciprocal_rank_fusion(rankings, k=0)["a"] == approx(1.25)
    assert fusion.reciprocal_rank_fusion(rankings, k=0)["b"] == approx(1.5)


def test_rrf_weights() -> None:
    rankings = {"dense": ["a"], "lexical": ["b"]}
    fused = fusion.reciprocal_rank_fusion(rankings, k=60, weights={"dense": 2.0, "lexical": 0.5})
    assert fused == {"a": approx(2 / 61), "b": approx(0.5 / 61)}
    zero = fusion.reciprocal_rank_fusion(rankings, k=60, weights={"dense": 0.0, "lexical": 1.0})
    assert zero["a"] == 0.0 and zero["b"] == approx(1 / 61)


def test_rrf_counts_a_repeated_id_once_at_its_best_rank() -> None:
    fused = fusion.reciprocal_rank_fusion({"dense": ["a", "a", "b"]}, k=60)
    assert fused == {"a": approx(1 / 61), "b": approx(1 / 63)}


def test_rrf_of_nothing_is_empty() -> None:
    assert fusion.reciprocal_rank_fusion({"dense": [], "lexical": []}) == {}


@pytest.mark.parametrize("bad", [{"k": -1}, {"weights": {"dense": -1.0}}])
def test_rrf_rejects_negative_parameters(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        fusion.reciprocal_rank_fusion({"dense": ["a"]}, **bad)  # type: ignore[arg-type]


MIN_MAX = [
    ("spread", {"a": 2.0, "b": 4.0, "c": 3.0}, {"a": 0.0, "b": 1.0, "c": 0.5}),
    ("negative", {"a": -1.0, "b": 1.0}, {"a": 0.0, "b": 1.0}),
    ("all equal", {"a": 0.3, "b": 0.3}, {"a": 1.0, "b": 1.0}),
    ("one", {"a": 7.5}, {"a": 1.0}),
    ("none", {}, {}),
]


@pytest.mark.parametrize(("case", "scores", "expected"), MIN_MAX, ids=[c[0] for c in MIN_MAX])
def test_min_max(case: str, scores: dict[str, float], expected: dict[str, float]) -> None:
    assert fusion.min_max(scores) == expected


def test_weighted_fusion_by_hand() -> None:
    fused = fusion.weighted_fusion(
        {
            "dense": {"a": 0.9, "b": 0.5, "c": 0.1},  # -> a 1.0, b 0.5, c 0.0
            "lexical": {"b": 12.0, "d": 4.0},  # -> b 1.0, d 0.0
        },
        weights={"dense": 0.7, "lexical": 0.3},
    )
    assert fused == {"a": approx(0.7), "b": approx(0.35 + 0.3), "c": 0.0, "d": 0.0}
    assert fusion.ranked(fused) == ["a", "b", "c", "d"]


def test_weighted_fusion_default_weights_are_equal() -> None:
    fused = fusion.weighted_fusion({"dense": {"a": 1.0, "b": 0.0}, "lexical": {"b": 5.0, "a": 1.0}})
    assert fused == {"a": approx(1.0), "b": approx(1.0)}
    assert fusion.ranked(fused) == ["a", "b"]  # a tie is broken by id


def test_ranked_is_deterministic_on_ties() -> None:
    assert fusion.ranked({"z": 1.0, "a": 1.0, "m": 2.0}) == ["m", "a", "z"]


def test_ranked_breaks_score_ties_by_the_tiebreak_then_id() -> None:
    scores = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 2.0}
    assert fusion.ranked(scores, {"b": 0.9, "c": 0.4}) == ["d", "b", "c", "a"]  # a has none: 0


def test_equal_rrf_sums_added_in_another_order_still_tie() -> None:
    # x is rank 3 in dense and 7 in lexical, y the reverse: mathematically equal sums that
    # floating point may split by one ulp; the tiebreak must decide, not the rounding error
    rankings = {
        "dense": ["p", "q", "x", "r", "s", "t", "y"],
        "lexical": ["p", "q", "y", "r", "s", "t", "x"],
    }
    fused = fusion.reciprocal_rank_fusion(rankings)
    assert fused["x"] == approx(fused["y"])
    order = fusion.ranked(fused, {"x": 0.1, "y": 0.8})
    assert order.index("y") < order.index("x")
    order = fusion.ranked(fused, {"x": 0.8, "y": 0.1})
    assert order.index("x") < order.index("y")


def test_hybrid_rrf_ties_go_to_the_more_confident_candidate() -> None:
    from corpus_index.retrieval import fuse as _fuse

    def row(vid: str, **extra: float) -> dict[str, object]:
        return {"vector_id": vid, **extra}

    # "a" is dense rank 2 (cosine 0.50), "b" lexical rank 2 (BM25 9.9 of 10): equal RRF scores;
    # b sits near the top of its list's score range, a near the bottom of its own
    dense = [row("top", _distance=0.1), row("a", _distance=0.5), row("low", _distance=0.52)]
    lexical = [row("top", _score=10.0), row("b", _score=9.9), row("tail", _score=1.0)]
    out = [
        c.row["vector_id"]
        for c in _fuse(dense, lexical, mode="hybrid", method="rrf", rrf_k=60, weights=(1.0, 1.0))
    ]
    assert out[:3] == ["top", "b", "a"]  # by id alone "a" would come first


def test_dedupe_keeps_the_first_of_each_key() -> None:
    items = [("a", "h1"), ("b", "h2"), ("c", "h1"), ("d", "h3"), ("e", "h2")]
    assert fusion.dedupe(items, key=lambda x: x[1]) == [("a", "h1"), ("b", "h2"), ("d", "h3")]


CAPS = [
    (None, ["a1", "a2", "b1", "a3", "b2", "c1", "a4"]),
    (1, ["a1", "b1", "c1"]),
    (2, ["a1", "a2", "b1", "b2", "c1"]),
    (10, ["a1", "a2", "b1", "a3", "b2", "c1", "a4"]),
]


@pytest.mark.parametrize(("cap", "expected"), CAPS)
def test_cap_per_group(cap: int | None, expected: list[str]) -> None:
    items = ["a1", "a2", "b1", "a3", "b2", "c1", "a4"]
    assert fusion.cap_per_group(items, key=lambda x: x[0], cap=cap) == expected


def test_cap_must_be_positive() -> None:
    with pytest.raises(ValueError):
        fusion.cap_per_group(["a"], key=lambda x: x, cap=0)


rankings = st.lists(
    st.lists(st.sampled_from("abcdefghij"), max_size=10, unique=True), min_size=1, max_size=3
)


@settings(max_examples=100, deadline=None)
@given(lists=rankings, k=st.integers(0, 100))
def test_rrf_invariants(lists: list[list[str]], k: int) -> None:
    named = {f"r{i}": ids for i, ids in enumerate(lists)}
    fused = fusion.reciprocal_rank_fusion(named, k=k)
    assert set(fused) == {d for ids in lists for d in ids}
    for doc, score in fused.items():
        expected = sum(1 / (k + ids.index(doc) + 1) for ids in lists if doc in ids)
        assert score == pytest.approx(expected)
    # an id ranked first in every list that holds it, and present in all lists, wins
    if all(lists) and len({ids[0] for ids in lists}) == 1:
        assert fusion.ranked(fused)[0] == lists[0][0]
