"""Blocking gates computed on Arrow key arrays."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from corpus_index import gates


def test_vectors_match_their_inputs_counts_orphans_and_missing_once_each() -> None:
    written = pa.chunked_array([pa.array(["a", "b"]), pa.array(["b", "z"])], pa.string())
    gate = gates.vectors_match_their_inputs(written, pa.array(["a", "b", "c", "d"]))
    assert not gate.passed
    assert gate.metadata == {"vectors_without_input": 1, "inputs_without_vector": 2}


def test_vectors_match_their_inputs_passes_on_the_same_keys_in_any_form() -> None:
    keys = ["k2", "k1", "k3"]
    assert gates.vectors_match_their_inputs(keys, sorted(keys)).passed
    chunked = pa.chunked_array([pa.array(["k3"]), pa.array(["k1", "k2", "k1"])], pa.string())
    assert gates.vectors_match_their_inputs(chunked, pa.array(sorted(keys))).passed


def test_vectors_match_their_inputs_on_nothing_at_all() -> None:
    gate = gates.vectors_match_their_inputs(pa.chunked_array([], pa.string()), [])
    assert gate.passed
    gate = gates.vectors_match_their_inputs(pa.chunked_array([], pa.string()), ["x"])
    assert gate.metadata == {"vectors_without_input": 0, "inputs_without_vector": 1}


def test_one_backend_spec_fails_for_vectors_of_another_revision() -> None:
    producers = {("hash:v1-8", "v1"): 5, ("hash:v1-8", "v2"): 2}
    gate = gates.vectors_share_one_backend_spec(producers, backend_spec="hash:v1-8", revision="v1")
    assert not gate.passed
    assert gate.metadata == {
        "produced_by": "hash:v1-8 v1: 5, hash:v1-8 v2: 2",
        "vectors_from_other_embedders": 2,
    }
    other_spec = {("hash:v1-16", "v1"): 1}
    assert not gates.vectors_share_one_backend_spec(
        other_spec, backend_spec="hash:v1-8", revision="v1"
    ).passed


def test_one_backend_spec_passes_when_every_window_has_the_generations_producer() -> None:
    producers = {("st:all-MiniLM-L6-v2", "abc123"): 7}
    gate = gates.vectors_share_one_backend_spec(
        producers, backend_spec="st:all-MiniLM-L6-v2", revision="abc123"
    )
    assert gate.passed and gate.metadata["vectors_from_other_embedders"] == 0


def test_a_gate_that_did_not_run_is_neither_passed_nor_failed() -> None:
    gate = gates.Gate.not_run("some_check", "what it checks", "nothing to check it on")
    assert (gate.passed, gate.ran, gate.status) == (False, False, "NOT RUN")
    recorded = gate.to_json()
    assert gates.not_run(recorded) and not gates.not_run(gates.Gate("x", True, "d").to_json())
    summary = gates.check_summary({"a": {"passed": True}, "some_check": recorded})
    assert summary == "1 checks passed; NOT RUN: some_check"
    failed = gates.check_summary({"a": {"passed": False}, "some_check": recorded})
    assert failed == "FAILED: a; NOT RUN: some_check"
    assert gates.check_summary({}) == "checks not run"


def test_norm_check_on_no_vectors_does_not_call_a_normalized_profile_unnormalized() -> None:
    g = gates.vector_norms_match_profile(np.empty((0, 8), np.float32), normalized=True)
    assert g.passed and "unnormalized" not in g.description
    assert "normalized" in g.description
    g = gates.vector_norms_match_profile(np.ones((2, 8), np.float32), normalized=False)
    assert g.passed and "unnormalized" in g.description


def test_the_dim_check_records_the_widths_the_vectors_came_at() -> None:
    g = gates.vectors_have_profile_dim(np.zeros((3, 48), np.float32), 64)
    assert not g.passed and g.metadata == {"expected_dim": 64, "actual_dim": 48}
    assert gates.vectors_have_profile_dim(np.zeros((0, 64), np.float32), 64).passed
    # vectors of two widths, put into one matrix of the profile's width
    mixed = gates.vectors_have_profile_dim(np.zeros((5, 64), np.float32), 64, widths={64: 3, 48: 2})
    assert not mixed.passed
    assert mixed.metadata == {"expected_dim": 64, "actual_dim": 48, "widths": "48: 2, 64: 3"}
