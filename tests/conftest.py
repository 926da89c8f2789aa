"""Shared fixtures: generated homes with small corpora, and environment hygiene."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from corpus_index.config import Settings  # noqa: E402
from corpus_index.environment import configure_environment  # noqa: E402
from corpus_index.runner import DEFAULT_RUNNER, ENTRY_POINT_GROUP  # noqa: E402
from tests.corpusgen import write_home  # noqa: E402

if TYPE_CHECKING:
    from tests.registry_backends import Place
    from tests.support.postgres import LocalPostgres
    from tests.support.s3_server import LocalS3

configure_environment()  # what every entry point does first (the CLI, definitions.py)
# An editable install made before pyproject.toml declared the runner entry point has no such
# entry point in its metadata until it is reinstalled; the CLI then finds the Dagster runner
# through CORPUS_RUNNER (for in-process and subprocess runs alike). The entry point itself is
# checked against pyproject.toml in tests/test_library_boundary.py.
if DEFAULT_RUNNER not in {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}:
    os.environ.setdefault("CORPUS_RUNNER", "definitions:dagster_runner")


@pytest.fixture
def home(tmp_path: Path) -> Settings:
    """A config with two tenants (3 deals each) and the hash embedder, and an empty home folder."""
    config = write_home(tmp_path)
    return Settings(config_path=config, home=tmp_path / "home")


def _server_unavailable(what: str, exc: Exception) -> None:
    """No server binaries here: fail under CI (a skipped production test would pass unseen)."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} is needed by the prod tests: {exc}")
    pytest.skip(f"{what}: {exc}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[LocalPostgres]:
    """One real PostgreSQL per test worker, on loopback (tests/support/postgres.py)."""
    from tests.support.postgres import PostgresUnavailable, running_postgres

    try:
        with running_postgres() as server:
            yield server
    except PostgresUnavailable as exc:
        _server_unavailable("PostgreSQL", exc)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[LocalS3]:
    """One S3-compatible server (moto) per test worker, on loopback (tests/support/s3_server.py)."""
    from tests.support.s3_server import running_s3

    with running_s3() as server:
        yield server


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.prod)])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Place:
    """One empty registry per test on each backend: a DuckDB file, a PostgreSQL database."""
    from tests.registry_backends import place_for

    return place_for(request, request.param, tmp_path)
