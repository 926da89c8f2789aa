"""Retrieval metrics against cases computed by hand."""

from __future__ import annotations

import math

import pytest

from corpus_index.metrics import (
    dedupe,
    evaluate,
    mrr_at,
    ndcg_at,
    percentile,
    precision_at,
    recall_at,
)

QRELS = {"d1": 2, "d2": 1, "d3": 0}  # d3 judged not relevant


def test_recall_and_precision() -> None:
    ranking = ["x", "d2", "y", "d1"]
    assert recall_at(ranking, QRELS, 1) == 0.0
    assert recall_at(ranking, QRELS, 2) == 0.5
    assert recall_at(ranking, QRELS, 4) == 1.0
    assert precision_at(ranking, QRELS, 2) == 0.5
    assert precision_at(ranking, QRELS, 10) == 0.2  # P@k divides by k, as trec_eval does


def test_mrr_counts_the_first_relevant_hit_within_k() -> None:
    assert mrr_at(["x", "y", "d2"], QRELS, 10) == pytest.approx(1 / 3)
    assert mrr_at(["x", "y", "d2"], QRELS, 2) == 0.0
    assert mrr_at(["d3", "d1"], QRELS, 10) == 0.5  # grade 0 is not relevant


def test_ndcg_uses_graded_gains() -> None:
    # ranking d2 (gain 1) then d1 (gain 2): DCG = 1/log2(2) + 2/log2(3)
    # ideal d1 then d2: IDCG = 2/log2(2) + 1/log2(3)
    dcg = 1 + 2 / math.log2(3)
    idcg = 2 + 1 / math.log2(3)
    assert ndcg_at(["d2", "d1"], QRELS, 10) == pytest.approx(dcg / idcg)
    assert ndcg_at(["d1", "d2"], QRELS, 10) == pytest.approx(1.0)
    assert ndcg_at(["x"], QRELS, 10) == 0.0


def test_duplicates_earn_credit_once() -> None:
    assert dedupe(["a", "b", "a", "c", "b"]) == ["a", "b", "c"]
    # a system returning d1 twice cannot fill the ideal ranking with it
    assert ndcg_at(["d1", "d1"], QRELS, 10) == pytest.approx(2 / (2 + 1 / math.log2(3)))
    assert precision_at(["d1", "d1"], QRELS, 2) == 0.5


def test_evaluate_means_over_judged_queries() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 0}}  # q3 has nothing relevant: skipped
    run = {"q1": ["a"], "q2": ["x", "b"]}
    out = evaluate(run, qrels, recall_ks=(1, 5))
    assert out["queries"] == 2
    assert out["recall@1"] == 0.5
    assert out["recall@5"] == 1.0
    assert out["mrr@10"] == pytest.approx(0.75)
    assert out["ndcg@10"] == pytest.approx((1 + 1 / math.log2(3)) / 2, abs=1e-6)
    assert evaluate({}, qrels)["ndcg@10"] == 0.0  # a query never answered scores 0
    assert evaluate(run, {}) == {}


def test_percentile_interpolates() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 95) == 5.0
    assert percentile([], 50) == 0.0
    assert percentile([0.0, 10.0], 95) == pytest.approx(9.5)
