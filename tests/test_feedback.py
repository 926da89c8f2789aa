"""Pseudo-relevance feedback and z-score fusion on hand-computed cases (no engine involved)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from corpus_index import feedback, fusion


def test_rocchio_by_hand() -> None:
    q = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    docs = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=np.float32)
    # q + 1.0 * mean = (1, 0.5, 0.5), norm sqrt(1.5)
    moved = feedback.rocchio(q, docs, beta=1.0)
    assert moved == pytest.approx(np.array([1, 0.5, 0.5]) / math.sqrt(1.5), abs=1e-6)
    assert float(np.linalg.norm(moved)) == pytest.approx(1.0, abs=1e-6)
    # beta 2 on one document: (1, 2, 0) / sqrt(5)
    moved = feedback.rocchio(q, docs[:1], beta=2.0)
    assert moved == pytest.approx(np.array([1, 2, 0]) / math.sqrt(5), abs=1e-6)


def test_rocchio_without_feedback_or_weight_keeps_the_direction() -> None:
    q = np.array([3.0, 4.0], dtype=np.float32)
    assert feedback.rocchio(q, np.zeros((0, 2), np.float32), beta=1.0) == pytest.approx([0.6, 0.8])
    assert feedback.rocchio(q, np.ones((2, 2), np.float32), beta=0.0) == pytest.approx([0.6, 0.8])


def test_rocchio_refuses_bad_input() -> None:
    q = np.ones(3, dtype=np.float32)
    with pytest.raises(ValueError, match="beta"):
        feedback.rocchio(q, np.ones((1, 3), np.float32), beta=-0.1)
    with pytest.raises(ValueError, match="shape"):
        feedback.rocchio(q, np.ones((1, 4), np.float32), beta=1.0)


def test_expansion_terms_by_hand() -> None:
    # doc 1 (weight 3): wing x2, flow x1, drag x1 -> P(w|d) 1/2, 1/4, 1/4; "the" is a stopword
    # doc 2 (weight 1): flow x1, heat x1 -> 1/2, 1/2
    # P(w|R): wing 3/4*1/2 = 0.375, flow 3/4*1/4 + 1/4*1/2 = 0.3125, drag 0.1875, heat 0.125
    # "drag" is in the query: dropped; the top 2 of the rest renormalized over 0.6875
    terms = feedback.expansion_terms(
        "Drag of a body",
        ["the wing wing flow drag", "flow heat 42"],
        doc_weights=[3.0, 1.0],
        terms=2,
    )
    assert [t.term for t in terms] == ["wing", "flow"]
    assert [t.weight for t in terms] == pytest.approx([0.375 / 0.6875, 0.3125 / 0.6875])


def test_expansion_terms_edge_cases() -> None:
    assert feedback.expansion_terms("q", []) == []
    assert feedback.expansion_terms("q", ["the of and 123"]) == []
    with pytest.raises(ValueError, match="2 document weights for 1"):
        feedback.expansion_terms("q", ["text"], doc_weights=[1.0, 1.0])
    with pytest.raises(ValueError, match=">= 0"):
        feedback.expansion_terms("q", ["text"], doc_weights=[-1.0])


def test_z_scores_by_hand() -> None:
    # mean 2, population stdev sqrt(2/3)
    z = fusion.z_scores({"a": 1.0, "b": 2.0, "c": 3.0})
    sd = math.sqrt(2 / 3)
    assert z == pytest.approx({"a": -1 / sd, "b": 0.0, "c": 1 / sd})
    assert fusion.z_scores({"a": 5.0, "b": 5.0}) == {"a": 0.0, "b": 0.0}
    assert fusion.z_scores({}) == {}


def test_z_fusion_by_hand() -> None:
    # dense: a 0.9, b 0.5 -> z a +1, b -1 ; lexical: b 10, c 6, d 2 -> z b +1.2247, c 0, d -1.2247
    # a is missing from lexical: it gets the lexical floor (-1.2247); c, d get the dense floor (-1)
    fused = fusion.z_fusion(
        {"dense": {"a": 0.9, "b": 0.5}, "lexical": {"b": 10.0, "c": 6.0, "d": 2.0}},
        weights={"dense": 1.0, "lexical": 2.0},
    )
    r = math.sqrt(1.5)
    assert fused == pytest.approx({"a": 1 - 2 * r, "b": -1 + 2 * r, "c": -1 + 0.0, "d": -1 - 2 * r})
    assert fusion.ranked(fused) == ["b", "c", "a", "d"]
    with pytest.raises(ValueError, match="weight"):
        fusion.z_fusion({"dense": {"a": 1.0}}, weights={"dense": -1.0})


def test_z_fusion_of_a_complete_list_knows_the_missing_scores_are_zero() -> None:
    # lexical is complete: a (missing) scores 0 there; over a, b, c the lexical scores are
    # 0, 10, 6 (mean 16/3, population stdev sqrt(152/9)), not a floor of the list's own minimum
    scores = {"dense": {"a": 0.9, "b": 0.5}, "lexical": {"b": 10.0, "c": 6.0}}
    fused = fusion.z_fusion(scores, complete=("lexical",))
    sd = math.sqrt(152 / 9)
    lz = {"a": (0 - 16 / 3) / sd, "b": (10 - 16 / 3) / sd, "c": (6 - 16 / 3) / sd}
    dz = {"a": 1.0, "b": -1.0, "c": -1.0}  # c is missing from dense: the dense floor
    assert fused == pytest.approx({d: dz[d] + lz[d] for d in "abc"})
    # not complete: a gets the lexical list's own lowest standard score (that of c, -1)
    assert fusion.z_fusion(scores) == pytest.approx({"a": 1 - 1, "b": -1 + 1, "c": -1 - 1})
    # an empty complete list adds nothing
    assert fusion.z_fusion(
        {"dense": {"a": 0.9, "b": 0.5}, "lexical": {}}, complete=("lexical",)
    ) == pytest.approx({"a": 1.0, "b": -1.0})


def test_unit_centroids_by_hand() -> None:
    groups = [
        np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=np.float32),  # mean (.5, .5, 0)
        np.array([[0.0, 0.0, 2.0]], dtype=np.float32),  # one row: itself, unit length
    ]
    got = feedback.unit_centroids(groups)
    r = 1 / math.sqrt(2)
    assert got == pytest.approx(np.array([[r, r, 0.0], [0.0, 0.0, 1.0]]))
    assert feedback.unit_centroids([]).size == 0
    with pytest.raises(ValueError, match="needs >= 1 row"):
        feedback.unit_centroids([np.zeros((0, 3), dtype=np.float32)])
    with pytest.raises(ValueError, match="different dimensions"):
        feedback.unit_centroids([np.ones((1, 3), dtype=np.float32), np.ones((1, 2))])
