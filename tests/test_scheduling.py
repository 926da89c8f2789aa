"""The order in which ``make test`` hands test files to its workers (tests/scheduling.py)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tests.scheduling import THREAD_VARS, longest_first, memory_parent, read_table


def test_files_run_longest_first_and_keep_their_tests_in_order() -> None:
    ids = ["a.py::t1", "a.py::t2", "b.py::t1", "c.py::t1", "c.py::t2", "d.py::t1"]
    seconds = {"a.py": 1.0, "b.py": 30.0, "c.py": 100.0}
    ordered = [ids[i] for i in longest_first(ids, seconds)]
    # d.py is not in the table: it weighs the median (30 s) and ties b.py, after it
    assert ordered == ["c.py::t1", "c.py::t2", "b.py::t1", "d.py::t1", "a.py::t1", "a.py::t2"]


def test_without_a_table_the_collection_order_stands() -> None:
    ids = ["b.py::t", "a.py::t1", "a.py::t2"]
    assert longest_first(ids, {}) == [0, 1, 2]


def test_an_unreadable_table_counts_as_empty(tmp_path: Path) -> None:
    bad = tmp_path / "seconds.json"
    bad.write_text("{not json", encoding="utf-8")
    assert read_table(bad) == {}
    bad.write_text('{"a.py": 2, "b.py": "x"}', encoding="utf-8")
    assert read_table(bad) == {"a.py": 2.0}


def test_the_recorded_table_names_files_that_exist() -> None:
    root = Path(__file__).resolve().parents[1]
    table = read_table()
    assert table, "tests/file_seconds.json is missing or empty"
    assert all((root / name).is_file() for name in table), "stale entries in file_seconds.json"


def test_temporary_folders_are_in_memory_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORPUS_TEST_TMP", "disk")
    assert memory_parent() is None
    monkeypatch.setenv("CORPUS_TEST_TMP", str(tmp_path))
    assert memory_parent() == tmp_path
    monkeypatch.delenv("CORPUS_TEST_TMP")
    if memory_parent() is not None:  # this run's own folders are there
        assert Path(tempfile.gettempdir()) != memory_parent()
        assert tmp_path.is_relative_to(memory_parent())


def test_several_workers_get_one_thread_each(request: pytest.FixtureRequest) -> None:
    # an xdist worker knows how many there are; a run without workers is a single process
    workers = getattr(request.config, "workerinput", {}).get("workercount", 1)
    if workers == 1:
        pytest.skip("a single process keeps the thread pools' defaults")
    assert {os.environ.get(name) for name in THREAD_VARS} == {"1"}
