"""Blocking gates computed on Arrow key arrays."""

from __future__ import annotations

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
