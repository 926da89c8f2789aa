"""Locks that span machines: with the registry in PostgreSQL, a scope lock also holds the
scope's advisory lock there, and the home's lock the home's, so runs whose homes are on
different machines (two home folders here, whose file locks never meet) still take turns
writing one thing, and a compaction waits for every run."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from corpus_index import lance, steps
from corpus_index.config import Settings
from corpus_index.errors import HomeBusyError, LockLostError, RetryableError
from corpus_index.held_locks import confirm_held, held, holding
from corpus_index.home import Home
from corpus_index.homelock import home_lock, scope_lock
from corpus_index.registry import Registry
from corpus_index.warehouse import Background, Warehouse
from tests.support.lockholder import hold, hold_scope
from tests.support.postgres import LocalPostgres
from tests.test_registry import SPEC, ready

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


def _end_sessions(url: str) -> int:
    """End every other session of ``url``'s database, as a restart of the database (or an
    administrator's ``pg_terminate_backend``) does; returns how many were ended."""
    import psycopg2

    admin = psycopg2.connect(url)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return int(cur.rowcount)
    finally:
        admin.close()


def test_a_lock_held_still_is_confirmed_and_one_given_back_is_no_longer_confirmed(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    url = postgres_server.create_database("held_locks")
    home = tmp_path / "home"
    assert held() == ()
    with (
        home_lock(home, "run 1234abcd of ingest_job", shared=True, across=url),
        scope_lock(home, SCOPE, "step index_rows", across=url),
    ):
        assert len(held()) == 2  # the home's and the scope's (the gate was given back)
        confirm_held()
        confirm_held()  # asking again changes nothing
        other: list[tuple[object, ...]] = []
        thread = threading.Thread(target=lambda: other.append(held()))
        thread.start()
        thread.join(30)
        assert other == [()]  # held by the thread that took them
    assert held() == ()
    confirm_held()  # nothing held: nothing to confirm
    with scope_lock(home, SCOPE, "step index_rows"):  # no registry database: nothing recorded
        assert held() == ()


def test_a_lock_whose_session_the_database_ended_is_named_as_lost_when_confirmed(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    url = postgres_server.create_database("lost_locks")
    home = tmp_path / "home"
    with scope_lock(home, SCOPE, "step index_rows", across=url):
        locks = held()
        assert _end_sessions(url) >= 1
        with pytest.raises(LockLostError) as lost:
            confirm_held()
        # a thread that finishes the holder's write (LanceDB's, reading a stream) confirms
        # the holder's locks
        failed: list[BaseException] = []

        def finish() -> None:
            try:
                confirm_held(locks)
            except LockLostError as exc:
                failed.append(exc)

        thread = threading.Thread(target=finish)
        thread.start()
        thread.join(30)
        assert len(failed) == 1
    message = str(lost.value)
    assert message.startswith(f"lost the lock of {SCOPE} of home {home} in the registry database")
    assert "its session ended" in message and "lost_locks" in message
    assert "nothing was published: run the step again" in message
    assert "the database restarted" in "\n".join(lost.value.__notes__)
    assert isinstance(lost.value, RetryableError)
    # the home's lock too, once its session ended
    with home_lock(home, "sync", across=url):
        _end_sessions(url)
        with pytest.raises(LockLostError, match=rf"lost the lock of home {re.escape(str(home))} "):
            confirm_held()


def test_a_step_that_lost_its_lock_publishes_no_partition(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    """The partitions on disk stay the last good ones: neither those staged beside the step's
    work (``Background``) nor one written at once (``Warehouse.write``) are put in place, and
    none is removed (``Warehouse.delete``, ``delete_collection``)."""
    url = postgres_server.create_database("lost_publish")
    wh = Warehouse(tmp_path / "wh")
    good, new = pa.table({"x": [1]}), pa.table({"x": [2]})
    wh.write("rows", ("alpha",), good)
    wh.write("memo", ("alpha",), good)
    with scope_lock(tmp_path / "home", "collection:alpha", "step linked_groups", across=url):
        with Background() as io:
            io.stage(wh, "rows", ("alpha",), new)
            io.stage(wh, "memo", ("alpha",), new)
            io.publish()  # while the lock is held, the step's writes are put in place
        assert wh.read("rows", ("alpha",)) == new
        wh.write("rows", ("alpha",), good)
        _end_sessions(url)
        with pytest.raises(LockLostError, match="collection:alpha"), Background() as io:
            io.stage(wh, "rows", ("alpha",), new)
            io.stage(wh, "memo", ("alpha",), new)
            io.publish()
        with pytest.raises(LockLostError, match="collection:alpha"):
            wh.write("memo", ("alpha",), pa.table({"x": [3]}))
        # nor is one removed
        with pytest.raises(LockLostError, match="collection:alpha"):
            wh.delete("rows", ("alpha",))
        with pytest.raises(LockLostError, match="collection:alpha"):
            wh.delete_collection("alpha")
    assert wh.read("rows", ("alpha",)) == good
    assert wh.read("memo", ("alpha",)) == new  # the last one published while it was held
    assert not list((tmp_path / "wh").rglob("*.tmp"))  # nor anything left beside them


def test_a_step_that_lost_its_lock_commits_nothing_to_lancedb_or_the_registry(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    """A LanceDB commit (a deletion's or a purge's delete, a compaction's ``optimize``) and a
    registry transaction that writes confirm the step's locks first: lost, they change
    nothing; a transaction that only reads still answers."""
    url = postgres_server.create_database("lost_commits")
    table = lance.connect(str(tmp_path / "lance")).create_table("rows", pa.table({"x": [1, 2, 3]}))
    stone = {"source_id": "alpha/a", "collection": "alpha", "namespace": "main"}
    with scope_lock(tmp_path / "home", "collection:alpha", "step deletion", across=url):
        # while the lock is held, both commit
        lance.retry_commits(lambda: table.delete("x = 3"), table=table)
        Registry(url, journal=tmp_path / "journal.jsonl").add_tombstones([stone])
        _end_sessions(url)
        with pytest.raises(LockLostError, match="collection:alpha"):
            lance.retry_commits(lambda: table.delete("x = 1"), table=table)
        with pytest.raises(LockLostError, match="collection:alpha"):
            lance.retry_commits(table.optimize, table=table)
        # a registry connection made after the lock was lost: its own session is alive
        registry = Registry(url, journal=tmp_path / "journal.jsonl")
        with pytest.raises(LockLostError, match="collection:alpha"):
            registry.add_tombstones([{**stone, "source_id": "alpha/b"}])
        assert [t["source_id"] for t in registry.tombstones()] == ["alpha/a"]
    assert sorted(table.to_arrow()["x"].to_pylist()) == [1, 2]
    assert table.version == 2  # created, one delete: no later commit
    # the lock let go, the same registry writes again
    registry.add_tombstones([{**stone, "source_id": "alpha/b"}])
    assert sorted(t["source_id"] for t in registry.tombstones()) == ["alpha/a", "alpha/b"]


def test_index_rows_that_lost_its_lock_commits_no_row_to_the_generation(
    postgres_server: LocalPostgres, home: Settings
) -> None:
    """LanceDB reads the step's stream of rows on threads of its own and commits once it has
    read the end: the step's lock, lost while it built them, stops the commit there."""
    url = postgres_server.create_database("lost_rows")
    corpus = Home(home)
    profile = next(iter(corpus.config.profiles))
    collection = next(
        c for c in corpus.config.collections if corpus.config.profile_covers(profile, c)
    )
    steps.source_manifest.run(corpus, collection)
    steps.parsed_blocks.run(corpus, collection)
    steps.embedding_inputs.run(corpus, collection)
    steps.embeddings.run(corpus, profile, collection)
    scope = f"generation:{profile}"
    with scope_lock(home.home, scope, "step index_rows", across=url):
        _end_sessions(url)
        with pytest.raises(LockLostError, match=f"lost the lock of {scope} of home"):
            steps.index_rows.run(corpus, profile, collection, run_id="lost")
        with pytest.raises(LockLostError, match=f"lost the lock of {scope} of home"):
            steps.index_generation.run(corpus, profile, run_id="lost")
    generation = corpus.registry.open_generation(corpus.spec(profile), run_id="again")
    assert corpus.store.count(generation) == 0
    assert generation.status != "READY"
    # run again under a lock held to the end, the step writes its rows
    with scope_lock(home.home, scope, "step index_rows", across=url):
        outcome = steps.index_rows.run(corpus, profile, collection, run_id="again")
    assert outcome.passed and outcome.rows > 0
    assert corpus.store.count(generation) == outcome.rows


class _PausedAfterConfirming:
    """What happens while a holder is paused just after it confirmed its locks (a SIGSTOP, a
    frozen VM): its lock's session is ended and another machine takes the lock. Held after
    the holder's own lock, it is confirmed after it, once."""

    def __init__(self, url: str, purpose: str, take_over: threading.Thread) -> None:
        self.url, self.purpose, self.take_over = url, purpose, take_over
        self.taken = threading.Event()

    def confirm(self) -> None:
        import psycopg2

        if self.take_over.is_alive() or self.taken.is_set():
            return
        admin = psycopg2.connect(self.url)
        admin.autocommit = True
        try:
            with admin.cursor() as cur:
                cur.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND application_name LIKE %s",
                    (f"%({self.purpose})",),
                )
                assert cur.rowcount == 1
        finally:
            admin.close()
        self.take_over.start()
        assert self.taken.wait(30), "the other machine never took the lock"

    def check_fence(self, cursor: object, database: str) -> None:
        pass


@pytest.mark.parametrize("publication", ["deletion", "promotion"])
def test_a_holder_paused_after_confirming_commits_nothing_once_its_lock_passed_on(
    postgres_server: LocalPostgres, tmp_path: Path, publication: str
) -> None:
    """Holder A confirms its lock, is paused, its session ends and B takes the lock: A's
    registry transaction finds the lock's fencing token moved and commits nothing (the
    confirmation alone let it commit); B's commits."""
    url = postgres_server.create_database(f"fenced_{publication}")
    scope = "collection:alpha"
    registry = Registry(url, journal=tmp_path / "journal.jsonl")
    stone = {"source_id": "alpha/a", "collection": "alpha", "namespace": "main"}
    first, second = ready(registry, SPEC), ready(registry, SPEC)

    def publish(who: str) -> None:
        mine = Registry(url, journal=tmp_path / "journal.jsonl")
        if publication == "deletion":
            mine.add_tombstones([{**stone, "source_id": f"alpha/{who}"}])
        else:
            mine.promote(first if who == "a" else second)

    a_failed = threading.Event()
    b_done: list[str] = []

    def machine_b() -> None:
        with scope_lock(tmp_path / "machine-b", scope, "step B", wait_s=30, across=url):
            paused.taken.set()
            assert a_failed.wait(30)
            publish("b")
            b_done.append("published")

    paused = _PausedAfterConfirming(url, "step A", threading.Thread(target=machine_b))
    try:
        with (
            scope_lock(tmp_path / "machine-a", scope, "step A", across=url),
            holding(paused),
            pytest.raises(LockLostError) as lost,
        ):
            publish("a")
    finally:
        a_failed.set()
        if paused.take_over.is_alive():
            paused.take_over.join(30)
    message = str(lost.value)
    assert message.startswith(f"lost the lock of {scope} of home {tmp_path / 'machine-a'} in")
    assert "another holder took it since this one did" in message
    assert "nothing was published" in message
    assert b_done == ["published"]
    if publication == "deletion":
        assert [t["source_id"] for t in registry.tombstones()] == ["alpha/b"]
    else:
        active = registry.active(SPEC.namespace)
        assert active is not None and active.id == second
        assert [g.id for g in registry.generations() if g.status == "ACTIVE"] == [second]


def test_shared_holders_of_the_home_keep_their_tokens_and_an_exclusive_taker_moves_them(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    """Runs holding the home shared publish beside each other (a shared taker moves no other
    shared holder's token); once a run's session ended and a compaction took the home alone,
    the run, paused after confirming, commits nothing."""
    url = postgres_server.create_database("fenced_home")
    registry = Registry(url, journal=tmp_path / "journal.jsonl")
    stone = {"source_id": "alpha/a", "collection": "alpha", "namespace": "main"}

    def publish(who: str) -> None:
        Registry(url, journal=tmp_path / "journal.jsonl").add_tombstones(
            [{**stone, "source_id": f"alpha/{who}"}]
        )

    other_in, other_out = threading.Event(), threading.Event()

    def beside() -> None:
        with home_lock(tmp_path / "machine-b", "run 2", shared=True, wait_s=30, across=url):
            other_in.set()
            assert other_out.wait(30)
            publish("beside")

    compacted: list[str] = []

    def compaction() -> None:
        with home_lock(tmp_path / "machine-c", "compact", wait_s=30, across=url):
            paused.taken.set()
            publish("compact")
            compacted.append("published")

    paused = _PausedAfterConfirming(url, "run 1", threading.Thread(target=compaction))
    other = threading.Thread(target=beside)
    with home_lock(tmp_path / "machine-a", "run 1", shared=True, across=url):
        other.start()
        assert other_in.wait(30)
        publish("first")  # the second shared taker did not move this holder's token
        other_out.set()
        other.join(30)
        with holding(paused), pytest.raises(LockLostError, match="another holder took it"):
            publish("lost")
    paused.take_over.join(30)
    assert compacted == ["published"]
    assert sorted(t["source_id"] for t in registry.tombstones()) == [
        "alpha/beside",
        "alpha/compact",
        "alpha/first",
    ]


def test_a_taker_waits_for_a_transaction_that_checked_the_former_holders_token(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    """A registry transaction that checked its token (``FOR SHARE`` on the lock's row, as
    ``check_fence`` does) and is paused before its COMMIT keeps the next taker from holding
    the lock until it ends, so its commit lands before the new holder's tenure."""
    import psycopg2

    from corpus_index.homelock import advisory_key

    url = postgres_server.create_database("fenced_wait")
    with scope_lock(tmp_path / "machine-a", SCOPE, "step A", across=url):
        pass  # the lock's row in lock_fences, token 1
    paused = psycopg2.connect(url)
    paused.set_session(isolation_level="SERIALIZABLE")
    taken = threading.Event()

    def take() -> None:
        with scope_lock(tmp_path / "machine-b", SCOPE, "step B", wait_s=30, across=url):
            taken.set()

    try:
        with paused.cursor() as cur:
            cur.execute(
                "SELECT token FROM lock_fences WHERE lock_key = %s FOR SHARE",
                (advisory_key(SCOPE),),
            )
            assert cur.fetchone() == (1,)
        taker = threading.Thread(target=take)
        taker.start()
        assert not taken.wait(1.5)  # the advisory lock is free, the token's row is not
        paused.commit()
        assert taken.wait(30)
        taker.join(30)
    finally:
        paused.close()
