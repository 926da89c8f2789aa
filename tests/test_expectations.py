"""The Great Expectations adapter: the real GX 1.x suite over Arrow rows."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from corpus_index import expectations
from corpus_index.errors import ConfigError

ROW = {
    "vector_id": "vec_" + "a" * 32,
    "chunk_ref": "chunk://c/d/v/risk_assessment/0",
    "source_id": "c/d",
    "collection": "c",
    "section": "risk_assessment",
    "text": "risk",
    "tenant_id": "t",
    "content_hash": "sha256:" + "b" * 64,
    "input_hash": "c" * 64,
    "backend_spec": "hash:v1-8",
    "generation": "g0001",
    "tier": "restricted",
    "kind": "uw_deals",
    "source_type": "uw_block",
}


def table(rows: list[dict[str, object]]) -> pa.Table:
    t = pa.Table.from_pylist(rows)
    return t.append_column("vector", pa.array([[0.0] * 4] * len(rows), pa.list_(pa.float32(), 4)))


def test_good_rows_pass_the_suite() -> None:
    gate = expectations.validate(
        table([ROW, {**ROW, "vector_id": "vec_" + "d" * 32, "chunk_ref": "x"}]), "index_rows"
    )
    assert gate.passed, gate.metadata
    assert gate.name == "index_rows_pass_expectation_suite"
    suite = json.loads(expectations.suite_path("index_rows").read_text())
    assert gate.metadata["expectations"] == len(suite["expectations"]) >= 10


def test_each_kind_of_failure_is_named() -> None:
    rows = [
        ROW,
        {**ROW, "chunk_ref": "other"},  # duplicate vector_id
        {**ROW, "vector_id": "vec_" + "e" * 32, "chunk_ref": "third", "tier": "secret"},
        {**ROW, "vector_id": "vec_" + "f" * 32, "chunk_ref": "fourth", "tenant_id": None},
    ]
    gate = expectations.validate(table(rows), "index_rows")
    assert not gate.passed
    failures = gate.metadata["failures"]
    assert "expect_column_values_to_be_unique(vector_id): 2 unexpected" in failures
    assert "expect_column_values_to_be_in_set(tier): 1 unexpected, e.g. ['secret']" in failures
    assert "expect_column_values_to_not_be_null(tenant_id): 1 unexpected" in failures
    assert gate.metadata["failed_expectations"] == 3


def test_kinds_and_source_types_are_the_registered_ones() -> None:
    rows = [
        ROW,
        {**ROW, "vector_id": "vec_" + "e" * 32, "chunk_ref": "b", "kind": "beir"},
        {**ROW, "vector_id": "vec_" + "f" * 32, "chunk_ref": "c", "source_type": "passage"},
        {**ROW, "vector_id": "vec_" + "0" * 32, "chunk_ref": "d", "kind": "pdfs"},
        {**ROW, "vector_id": "vec_" + "1" * 32, "chunk_ref": "e", "source_type": "scan"},
    ]
    failures = expectations.validate(table(rows), "index_rows").metadata["failures"]
    assert "expect_column_values_to_be_in_set(kind): 1 unexpected, e.g. ['pdfs']" in failures
    assert "(source_type): 1 unexpected, e.g. ['scan']" in failures


def test_a_missing_column_fails_without_calling_gx() -> None:
    rows = [{k: v for k, v in ROW.items() if k != "tier"}]
    gate = expectations.validate(table(rows), "index_rows")
    assert not gate.passed and gate.metadata["missing_columns"] == "tier"


def test_unknown_suite_is_a_config_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(expectations, "SUITE_DIR", tmp_path)
    with pytest.raises(ConfigError, match="expectation suite not found"):
        expectations.validate(table([ROW]), "nope")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ConfigError, match=r"broken.json:1: invalid JSON"):
        expectations.validate(table([ROW]), "broken")


def test_only_the_columns_the_suite_reads_reach_gx() -> None:
    suite = {
        "expectations": [
            {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "b"}},
            {"type": "expect_column_pair_values_to_be_equal", "kwargs": {"column_A": "d"}},
            {"type": "expect_compound_columns_to_be_unique", "kwargs": {"column_list": ["a"]}},
        ]
    }
    columns = ["a", "b", "c", "d", "vector"]
    assert expectations.frame_columns(columns, suite) == ["a", "b", "d"]
    whole = {"expectations": [*suite["expectations"], {"type": "expect_table_row_count_to_equal"}]}
    assert expectations.frame_columns(columns, whole) == ["a", "b", "c", "d"]
    assert expectations.frame_columns(columns, {"expectations": []}) == ["a", "b", "c", "d"]


def test_columns_no_expectation_reads_are_not_converted() -> None:
    # a column pandas cannot take (a union) fails the conversion if it reaches GX
    odd = pa.UnionArray.from_sparse(pa.array([0], pa.int8()), [pa.array([1]), pa.array(["x"])])
    with pytest.raises(pa.ArrowNotImplementedError):
        pa.table({"odd": odd}).to_pandas()
    gate = expectations.validate(table([ROW]).append_column("odd", odd), "index_rows")
    assert gate.passed, gate.metadata


def test_the_same_rows_under_the_same_suite_reach_gx_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(expectations, "_memo", OrderedDict())
    calls: list[int] = []
    real = expectations._validate

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(expectations, "_validate", counted)
    rows = [ROW, {**ROW, "vector_id": "vec_" + "9" * 32, "chunk_ref": "memo", "tier": "secret"}]
    first = expectations.validate(table(rows), "index_rows")
    assert not first.passed and "e.g. ['secret']" in first.metadata["failures"]
    again = expectations.validate(table(rows), "index_rows")
    assert again == first and len(calls) == 1
    again.metadata["failures"] = ""  # what a caller does to its answer is not remembered
    assert expectations.validate(table(rows), "index_rows") == first and len(calls) == 1
    # another value, another check name: validated by GX again
    fixed = expectations.validate(table([ROW, {**rows[1], "tier": "public"}]), "index_rows")
    assert fixed.passed and len(calls) == 2
    named = expectations.validate(table(rows), "index_rows", check_name="rows_ok")
    assert named.name == "rows_ok" and not named.passed and len(calls) == 3
