"""Locks that span machines: with the registry in PostgreSQL, a scope lock also holds the
scope's advisory lock there, and the home's lock the home's, so runs whose homes are on
different machines (two home folders here, whose file locks never meet) still take turns
writing one thing, and a compaction waits for every run."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from corpus_index.errors import HomeBusyError, RetryableError
from corpus_index.homelock import home_lock, scope_lock
from tests.support.lockholder import hold, hold_scope
from tests.support.postgres import LocalPostgres

pytestmark = pytest.mark.prod

SCOPE = "generation:main"
PURPOSE = "run 1234abcd step index_rows"


def hold_across(home: Path, url: str, seconds: float) -> subprocess.Popen[str]:
    """Another machine's step: a process holding ``SCOPE`` of its own home folder."""
    return hold_scope(home, seconds, SCOPE, PURPOSE, across=url)


def test_a_scope_held_on_one_machine_keeps_out_the_other(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    url = postgres_server.create_database("scope_locks")
    other = hold_across(tmp_path / "machine-a", url, 60)
    here = tmp_path / "machine-b"
    try:
        # the file lock alone does not see the other machine's holder
        with scope_lock(here, SCOPE, "step index_rows"):
            pass
        with (
            pytest.raises(HomeBusyError) as busy,
            scope_lock(here, SCOPE, "step index_rows", wait_s=0.5, across=url),
        ):
            pass
        message = str(busy.value)
        assert f"{SCOPE} of home {here} is busy after waiting 0.5 s" in message
        assert f"pid {other.pid} on " in message and f"({PURPOSE})" in message
        assert postgres_server.user in message and "scope_locks" in message
        # another scope of the same registry is free
        with scope_lock(here, "generation:other", "step index_rows", across=url):
            pass
    finally:
        other.kill()  # a crashed holder: its connection ends, and PostgreSQL lets the lock go
        other.wait()
    started = time.monotonic()
    with scope_lock(here, SCOPE, "step index_rows", wait_s=30, across=url):
        assert time.monotonic() - started < 30


def test_the_second_machine_waits_for_the_first_then_goes_on(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    url = postgres_server.create_database("scope_locks_wait")
    other = hold_across(tmp_path / "machine-a", url, 1.5)
    try:
        started = time.monotonic()
        with scope_lock(tmp_path / "machine-b", SCOPE, "step index_rows", wait_s=30, across=url):
            waited = time.monotonic() - started
        assert 1.0 < waited < 30  # it held the lock for 1.5 s after saying so
    finally:
        other.kill()
        other.wait()


def test_an_unreachable_registry_is_named_without_its_password(tmp_path: Path) -> None:
    url = "postgresql://someone:s3cret@127.0.0.1:9/nowhere"  # port 9: nothing listens
    with (
        pytest.raises(RetryableError) as error,
        scope_lock(tmp_path, SCOPE, "step index_rows", across=url),
    ):
        pass
    assert "cannot reach the registry database for the lock of generation:main" in str(error.value)
    assert "s3cret" not in str(error.value)


def test_the_homes_lock_spans_machines_shared_beside_shared_never_beside_exclusive(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    url = postgres_server.create_database("home_locks")
    step = "run 1234abcd of ingest_job"
    other = hold(tmp_path / "machine-a", 60, step, shared=True, across=url)
    here = tmp_path / "machine-b"
    try:
        # another run's step goes on beside it
        with home_lock(here, "run 5678abcd of embed_job", shared=True, wait_s=0.5, across=url):
            pass
        # the file lock alone does not see the other machine's run
        with home_lock(here, "compact"):
            pass
        with (
            pytest.raises(HomeBusyError) as busy,
            home_lock(here, "compact", wait_s=0.5, across=url),
        ):
            pass
        message = str(busy.value)
        assert f"home {here} is busy after waiting 0.5 s" in message
        assert f"pid {other.pid} on " in message and f"({step})" in message
        assert "holds the home" in "\n".join(busy.value.__notes__)
        assert not (here / "corpus.lock").read_text()  # the file lock was given back
    finally:
        other.kill()
        other.wait()
    # a compaction on the other machine keeps a run's step out in turn
    other = hold(tmp_path / "machine-a", 60, "compact", across=url)
    try:
        with (
            pytest.raises(HomeBusyError, match=r"\(compact\)"),
            home_lock(here, step, shared=True, wait_s=0.5, across=url),
        ):
            pass
    finally:
        other.kill()
        other.wait()
    with home_lock(here, "compact", wait_s=30, across=url):
        pass


def test_a_compaction_waiting_on_one_machine_keeps_new_steps_out_on_another(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    """The gate spans machines too: while a compaction on machine B waits for a step on
    machine A, a step starting on machine C waits behind it."""
    url = postgres_server.create_database("home_gate")
    step = hold(tmp_path / "machine-a", 60, "run 1234abcd of ingest_job", shared=True, across=url)
    compacting, compacted = threading.Event(), threading.Event()

    def compaction() -> None:
        with home_lock(tmp_path / "machine-b", "compact", wait_s=30, across=url):
            compacting.set()
            compacted.wait(30)

    waiting = threading.Thread(target=compaction, daemon=True)
    waiting.start()
    try:
        deadline = time.monotonic() + 30
        while True:  # until the compaction holds the gate (a step on C is then kept out)
            try:
                with home_lock(tmp_path / "machine-c", "probe", shared=True, across=url):
                    pass
            except HomeBusyError as busy:
                assert "(compact)" in str(busy) and "home " in str(busy)
                break
            assert time.monotonic() < deadline, "the compaction never took the gate"
            time.sleep(0.05)
        assert not compacting.is_set()
    finally:
        step.kill()  # the step on A ends: the compaction goes in
        step.wait()
    try:
        assert compacting.wait(30)
    finally:
        compacted.set()
        waiting.join(30)
    with home_lock(tmp_path / "machine-c", "run 5678abcd of embed_job", shared=True, across=url):
        pass


def test_a_lock_whose_session_the_database_ended_is_let_go_without_an_error(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    """The database restarts under a held lock: its session, and the lock, are gone; leaving
    the lock raises nothing in place of what its holder did."""
    import psycopg2

    url = postgres_server.create_database("ended_locks")
    with scope_lock(tmp_path / "home", SCOPE, "step index_rows", across=url):
        admin = psycopg2.connect(url)
        admin.autocommit = True
        with admin.cursor() as cur:  # what a restart does to every session but this one
            cur.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            assert cur.rowcount >= 1
        admin.close()
    with scope_lock(tmp_path / "other", SCOPE, "step index_rows", wait_s=5, across=url):
        pass  # free again
