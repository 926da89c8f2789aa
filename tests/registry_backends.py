"""The registry's two backends for parametrized tests: a DuckDB file in the test's folder, or
a fresh database on the session's PostgreSQL (marked ``prod``: `make test-prod` runs those).
The ``place`` fixture (tests/conftest.py) gives each test one empty registry on each."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from corpus_index.registry import Registry
from corpus_index.traces import TraceStore

_numbers = itertools.count()


@dataclass(frozen=True, slots=True)
class Place:
    """Where one test's registry lives: a DuckDB file path or a PostgreSQL URL, and its journal."""

    backend: str
    location: Path | str
    journal: Path

    def open(self, **kwargs: float) -> Registry:
        return Registry(self.location, journal=self.journal, **kwargs)

    def traces(self, *, keep: int = 1000, lock_timeout_s: float = 5.0) -> TraceStore:
        return TraceStore(self.open(lock_timeout_s=lock_timeout_s), keep=keep)


def new_database(request: pytest.FixtureRequest) -> str:
    """A fresh, empty database on the session's PostgreSQL server; its URL."""
    server = request.getfixturevalue("postgres_server")
    return str(server.create_database(f"registry_{os.getpid()}_{next(_numbers)}"))


def place_for(request: pytest.FixtureRequest, backend: str, folder: Path) -> Place:
    journal = folder / "home" / "registry.journal.jsonl"
    if backend == "duckdb":
        return Place(backend, folder / "home" / "registry.duckdb", journal)
    return Place(backend, new_database(request), journal)
