"""One writer of a home's serving state at a time: a lock file under the home.

``corpus sync`` holds it for its whole run (two syncs would embed the same inputs twice, and a
paid embedder bills twice); a promotion or rollback holds it while it moves a pointer, so it
never serves a generation that a sync in flight is still changing. The lock is ``fcntl.flock``
on ``<home>/corpus.lock``: the kernel releases it when its holder dies, so a crash never leaves
the home locked. The file records who holds it, for the message the next process shows.

Dagster runs take it too (the ``corpus`` resource holds it for the run), so a run launched
from the UI or by the daemon and a `corpus sync` never work on one home at once. Within one
thread the lock is reentrant: a run executed in-process by `corpus sync`, which holds the lock
already, goes on under it.

Runs that execute their steps in processes of their own (the multiprocess executor) hold the
home's lock *shared*: they run beside each other, while a sync or a promotion, which hold it
exclusively, still wait for all of them. So do the runs of the jobs that work on the whole home
rather than on what one step writes (compaction, a collection's purge, a generation's
retirement, re-processing): they are tagged :data:`EXCLUSIVE_TAGS` and hold it exclusively
whatever the executor. What two shared runs could both write is then guarded by a *scope lock*
each step holds while it runs (``scope_lock``): one per collection (its warehouse partitions,
exports and embeddings) and one per profile's generation table (LanceDB's writers of one
table). The registry needs none: its transactions are short and retried while another process
holds the file.

File locks keep out the processes of one machine. With the registry in PostgreSQL, the home's
lock and each scope lock also take an advisory lock in that database (``across``), shared or
not as the file lock, which keeps out the runs of every machine sharing the registry (pods of
their own, a home on object storage). Such a lock lives as long as its database session: a
restart of the database, or the session ended by an administrator, lets it go unseen by its
holder while another machine may take it. So each is recorded as held by its thread
(``corpus_index.held_locks``), and what publishes a step's writes (the warehouse putting a
partition in place, ``index_rows`` committing a generation's rows, ``index_generation``
recording its gates) first confirms on each lock's own session that it still holds it, in
``pg_locks``: a lost lock fails the step with ``LockLostError`` (retryable), nothing published.

That confirmation is a check before the write. What makes a registry write conditional on the
lock is its fencing token: the home's lock and each scope lock keep a row in the registry's
``lock_fences``, whose token every exclusive taker bumps (and the first shared taker after an
exclusive one), and a holder keeps the token it took. A registry transaction that writes
checks, as its last statement, that the row still holds its thread's tokens, under a row lock
(``registry_sql``): a holder paused after its confirmation, whose lock passed on meanwhile,
finds the token moved and commits nothing; a taker that comes while such a check is in
flight waits for that transaction to end before it holds the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from corpus_index import held_locks
from corpus_index.errors import (
    HomeBusyError,
    HomeHeldSharedError,
    LockLostError,
    PermanentError,
    RetryableError,
)
from corpus_index.registry_sql import ensure_fences, is_database_url, libpq_url, redact

log = logging.getLogger(__name__)

LOCK_NAME = "corpus.lock"
GATE_NAME = "corpus.lock.gate"
SCOPES_DIR = "locks"
POLL_S = 0.2
# how long a taker of a lock waits at least (beside what is left of its wait) for a
# registry transaction of the lock's former holder that checked its fencing token to end
FENCE_WAIT_S = 10.0
# the advisory lock that stands for the home's lock in the registry's database (no scope's
# name: those have a kind before a colon)
HOME_SCOPE = "home"
HOME_GATE = "home gate"  # and its gate's
# the tags of a job whose runs hold the home exclusively even where runs share it (the
# ``corpus`` resource reads them): it works on the whole home (every table's files, every
# collection's groups), so no step of another run may write beside it
EXCLUSIVE_TAGS = {"corpus/home": "exclusive"}
# (lock file, thread) -> how deep that thread's holds of it are nested
_HELD: dict[tuple[str, int], int] = {}
_SHARED: set[tuple[str, int]] = set()  # ... of those, the ones held shared


def across_of(registry_url: str | None) -> str | None:
    """The ``across`` of a home whose registry is at ``registry_url``: the URL of a PostgreSQL
    registry, whose advisory locks keep out other machines' holders; none for DuckDB's."""
    return registry_url if is_database_url(registry_url) else None


class HomeSettings(Protocol):
    """What :func:`home_lock_of` reads of a home's settings."""

    @property
    def home(self) -> Path: ...

    @property
    def registry_url(self) -> str | None: ...


def home_lock_of(
    settings: HomeSettings, purpose: str, *, wait_s: float = 0.0, shared: bool = False
) -> contextlib.AbstractContextManager[None]:
    """:func:`home_lock` of the home of ``settings``, across the machines sharing its registry
    where that is PostgreSQL."""
    return home_lock(
        settings.home,
        purpose,
        wait_s=wait_s,
        shared=shared,
        across=across_of(settings.registry_url),
    )


def lock_path(home: Path) -> Path:
    """The lock file of the home ``home``."""
    return home / LOCK_NAME


def holder(home: Path) -> str:
    """What the lock file says about its holder (``pid 123 (sync)``), or ``''``."""
    try:
        return lock_path(home).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


@contextlib.contextmanager
def home_lock(
    home: Path,
    purpose: str,
    *,
    wait_s: float = 0.0,
    shared: bool = False,
    across: str | None = None,
) -> Iterator[None]:
    """Hold the home's lock for ``purpose`` (``sync``, ``promote``, ``rollback``).

    Waits up to ``wait_s`` seconds for another holder to finish (0: fail at once). A thread
    that holds the lock already holds it again at once (the holder named in the file stays
    the outer one), except alone while it holds it shared (HomeHeldSharedError). ``shared``: beside other shared holders (runs whose steps lock what they
    write), never beside an exclusive one; a shared holder names no holder in the file (it
    empties it of the line a killed exclusive holder left).

    Waiting to hold it alone keeps new shared holders out meanwhile: the exclusive waiter
    holds a gate (``corpus.lock.gate``) that each shared holder passes on its way in, so a
    sync or a compaction waits for the holders in flight only, never for a stream of runs
    that keep starting.

    ``across``: the registry's PostgreSQL URL. The home's advisory lock in that database is
    held too (shared or not, as the file lock), after the file lock, and so is its gate's, so
    a holder on another machine that shares the registry (a run's pod, a compaction elsewhere)
    is waited for as one on this machine is. It is recorded as held by this thread, which
    :func:`~corpus_index.held_locks.confirm_held` confirms before a write is published.

    Raises:
        HomeBusyError: another process still holds the lock after ``wait_s`` (in all); the
            message names the home and the holder's PID.
        RetryableError: the database of ``across`` cannot be reached.
    """
    home.mkdir(parents=True, exist_ok=True)
    path = lock_path(home)
    key = (str(path.resolve()), threading.get_ident())
    if key in _HELD:
        if key in _SHARED and not shared:
            raise HomeHeldSharedError(
                f"{purpose} needs {home} alone, and this thread holds it shared (a step of a "
                "run beside other runs): run it as a job that holds the home alone (tagged "
                f"{EXCLUSIVE_TAGS}), or from the command line"
            )
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    deadline = time.monotonic() + max(wait_s, 0.0)

    def take(stack: contextlib.ExitStack, file: Path, scope: str) -> None:
        stack.enter_context(_flock(file, home, purpose, wait_s, shared=shared, deadline=deadline))
        if across is not None:
            stack.enter_context(
                _advisory_lock(
                    across,
                    scope,
                    home,
                    purpose,
                    deadline=deadline,
                    wait_s=wait_s,
                    shared=shared,
                    fenced=scope == HOME_SCOPE,  # the gate guards no write
                )
            )

    with contextlib.ExitStack() as held:
        # the gate: one who would hold the home alone holds it while waiting for the holders
        # in flight, and a shared holder passes through it on its way in, so steps that keep
        # coming never keep a sync or a compaction out
        with contextlib.ExitStack() as gate:
            take(gate, gate_path(home), HOME_GATE)
            take(held, path, HOME_SCOPE)
        _HELD[key] = 1
        if shared:
            _SHARED.add(key)
        try:
            yield
        finally:
            del _HELD[key]
            _SHARED.discard(key)


def gate_path(home: Path) -> Path:
    """The gate of the home ``home``'s lock (see :func:`home_lock`)."""
    return home / GATE_NAME


def scope_path(home: Path, scope: str) -> Path:
    """The lock file of ``scope`` (``collection:alpha-deals``, ``generation:main``) in ``home``."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", scope)[:80]
    digest = hashlib.sha256(scope.encode()).hexdigest()[:8]  # names that read alike differ
    return home / SCOPES_DIR / f"{readable}-{digest}.lock"


@contextlib.contextmanager
def scope_lock(
    home: Path, scope: str, purpose: str, *, wait_s: float = 0.0, across: str | None = None
) -> Iterator[None]:
    """Hold the lock of one thing two runs sharing ``home`` could both write (exclusive).

    Scope locks are taken in one order (a collection before a generation), and a step holds
    at most one of each, so two steps never wait on each other in a circle.

    ``across``: the registry's PostgreSQL URL. The scope's advisory lock in that database is
    held too, after the file lock, so processes on other machines that share the registry
    (runs in pods of their own) wait as well. PostgreSQL releases it when the holder's
    connection ends, so a crashed holder never leaves it taken; a session that ends under a
    live holder (the database restarted) is caught by
    :func:`~corpus_index.held_locks.confirm_held` before the holder publishes.

    Raises:
        HomeBusyError: another process still holds that scope after ``wait_s`` (in all).
        RetryableError: the database of ``across`` cannot be reached.
    """
    path = scope_path(home, scope)
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + max(wait_s, 0.0)
    with _flock(path, home, purpose, wait_s, what=f"{scope} of home"):
        if across is None:
            yield
        else:
            with _advisory_lock(
                across, scope, home, purpose, deadline=deadline, wait_s=wait_s, fenced=True
            ):
                yield


def advisory_key(scope: str) -> int:
    """The 64-bit advisory-lock key of ``scope`` (the same in every process and machine)."""
    digest = hashlib.sha256(f"corpus-index scope {scope}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@contextlib.contextmanager
def _advisory_lock(
    url: str,
    scope: str,
    home: Path,
    purpose: str,
    *,
    deadline: float,
    wait_s: float,
    shared: bool = False,
    fenced: bool = False,
) -> Iterator[None]:
    """Hold ``scope``'s advisory lock in ``url``'s database (``shared``: beside other shared
    holders), polling until ``deadline`` (of the ``wait_s`` the whole lock may wait, which
    the message names); ``fenced``: take its fencing token too (:func:`_take_fence`), which
    the registry's transactions check."""
    import psycopg2

    key = advisory_key(scope)
    take, give = (
        ("pg_try_advisory_lock_shared", "pg_advisory_unlock_shared")
        if shared
        else ("pg_try_advisory_lock", "pg_advisory_unlock")
    )
    # the holder's name as the waiting process sees it (pg_stat_activity, 63 bytes at most)
    me = f"pid {os.getpid()} on {socket.gethostname()} ({purpose})"
    try:
        con = psycopg2.connect(
            libpq_url(url),
            connect_timeout=10,
            application_name=me.encode()[:63].decode(errors="ignore"),
        )
    except psycopg2.OperationalError as exc:
        raise RetryableError(
            f"{redact(url)}: cannot reach the registry database for the lock of {scope}: "
            f"{str(exc).strip().splitlines()[0]}"
        ) from None
    try:
        con.autocommit = True  # a session lock, held across the step, outside any transaction
        with con.cursor() as cur:
            while True:
                cur.execute(f"SELECT {take}(%s)", (key,))
                if cur.fetchone()[0]:
                    break
                if time.monotonic() >= deadline:
                    raise _busy_across(cur, key, url, scope, home, purpose, wait_s)
                time.sleep(POLL_S)
            try:
                token = (
                    _take_fence(cur, key, url, scope, home, shared=shared, deadline=deadline)
                    if fenced
                    else None
                )
                with held_locks.holding(_AdvisoryHold(con, key, url, scope, home, token)):
                    yield
            finally:
                _release(cur, give, key)
    finally:
        with contextlib.suppress(psycopg2.Error):
            con.close()


# whether the session running it holds the advisory lock of a bigint key (see _halves)
_STILL_HELD = (
    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
    " AND granted AND objsubid = 1 AND classid = %s AND objid = %s"
)


# an exclusive taker's token: one past the last (1 for the first taker)
_BUMP = (
    "INSERT INTO lock_fences (lock_key, token, exclusive) VALUES (%s, 1, true)"
    " ON CONFLICT (lock_key) DO UPDATE SET token = lock_fences.token + 1, exclusive = true"
    " RETURNING token"
)
# a shared taker's: one past the last where an exclusive holder had it, else the shared
# holders' own (a shared holder never moves another's)
_BUMP_AFTER_EXCLUSIVE = (
    "UPDATE lock_fences SET token = token + 1, exclusive = false"
    " WHERE lock_key = %s AND exclusive RETURNING token"
)
_FIRST_SHARED = (
    "INSERT INTO lock_fences (lock_key, token, exclusive) VALUES (%s, 1, false)"
    " ON CONFLICT (lock_key) DO NOTHING"
)
_TOKEN = "SELECT token FROM lock_fences WHERE lock_key = %s"


def _take_fence(
    cur: Any, key: int, url: str, scope: str, home: Path, *, shared: bool, deadline: float
) -> int:
    """The fencing token of the lock of ``key`` that ``cur``'s session has just taken: bumped
    by an exclusive taker (and by a shared one after an exclusive holder), so the former
    holder's registry transactions find it moved. A former holder's transaction checking its
    token holds the row until it ends: waited for, up to the rest of ``deadline`` and at least
    ``FENCE_WAIT_S``.

    Raises:
        HomeBusyError: that transaction did not end in time.
        PermanentError: the database's user may not create or use ``lock_fences``.
    """
    import psycopg2.errors

    try:
        ensure_fences(cur)
    except psycopg2.errors.InsufficientPrivilege as exc:
        raise _no_fences(url, scope, home, exc) from None
    wait_ms = int(max(deadline - time.monotonic(), FENCE_WAIT_S) * 1000)
    cur.execute("SET lock_timeout = %s", (wait_ms,))
    try:
        if not shared:
            cur.execute(_BUMP, (key,))
            return int(cur.fetchone()[0])
        cur.execute(_BUMP_AFTER_EXCLUSIVE, (key,))
        bumped = cur.fetchone()
        if bumped is not None:
            return int(bumped[0])
        cur.execute(_FIRST_SHARED, (key,))
        cur.execute(_TOKEN, (key,))
        return int(cur.fetchone()[0])
    except psycopg2.errors.LockNotAvailable:
        error = HomeBusyError(
            f"{_subject(scope, home)} is busy: a registry transaction of its lock's former "
            f"holder in {redact(url)} did not end within {wait_ms / 1000:g} s"
        )
        error.add_note(
            "the former holder lost the lock while it was committing (its session ended); "
            "wait for that transaction to end, then try again"
        )
        raise error from None
    except psycopg2.errors.InsufficientPrivilege as exc:
        raise _no_fences(url, scope, home, exc) from None
    finally:
        with contextlib.suppress(psycopg2.Error):  # a session gone has no setting to reset
            cur.execute("RESET lock_timeout")


def _no_fences(url: str, scope: str, home: Path, exc: BaseException) -> PermanentError:
    """The PermanentError for a user who may not create or use the lock's ``lock_fences``."""
    user = urlsplit(url).username or "the user"
    reason = str(exc).strip().splitlines()[0]
    return PermanentError(
        f"{redact(url)}: {user} may not keep the fencing token of the lock of "
        f"{_subject(scope, home)} ({reason}): create the table lock_fences once as a user "
        "who may (any corpus command on the registry creates it), and grant "
        f"{user} SELECT, INSERT and UPDATE on it"
    )


def _halves(key: int) -> tuple[int, int]:
    """``pg_locks``' ``(classid, objid)`` of a bigint advisory key: PostgreSQL keeps it as two
    32-bit halves, the high one first (``objsubid`` 1)."""
    return (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF


def _subject(scope: str, home: Path) -> str:
    """What a lock of ``scope`` locks, as messages name it."""
    return f"home {home}" if scope in (HOME_SCOPE, HOME_GATE) else f"{scope} of home {home}"


@dataclass(frozen=True, slots=True, eq=False)
class _AdvisoryHold:
    """An advisory lock a thread holds, on the session (``con``) that took it."""

    con: Any
    key: int
    url: str
    scope: str
    home: Path
    token: int | None  # its fencing token (see _take_fence); None: it has none

    def confirm(self) -> None:
        """Return if the lock's session is alive and holds it still.

        Raises:
            LockLostError: it does not (or cannot be asked: its connection is gone).
        """
        import psycopg2

        try:
            with self.con.cursor() as cur:
                cur.execute(_STILL_HELD, _halves(self.key))
                if cur.fetchone() is not None:
                    return
            why = "its session no longer holds it"
        except psycopg2.Error as exc:  # the connection is gone, and its session with it
            said = str(exc).strip().splitlines()
            why = f"its session ended ({said[0]})" if said else "its session ended"
        raise _lost(self.url, self.scope, self.home, why)

    def check_fence(self, cursor: Any, database: str) -> None:
        """Check inside the transaction of ``cursor`` that the lock's fencing token is still
        this holder's, and hold its row (``FOR SHARE``) so that no taker bumps it before the
        transaction ends; nothing for a lock without a token or kept in another database.

        Raises:
            LockLostError: the token moved: another holder took the lock since.
        """
        import psycopg2.errors

        if self.token is None or libpq_url(database) != libpq_url(self.url):
            return
        try:
            cursor.execute(f"{_TOKEN} FOR SHARE", (self.key,))
        except psycopg2.errors.SerializationFailure as exc:
            # SERIALIZABLE: the row changed since the transaction's snapshot, and nothing
            # but a taker of the lock changes it while its holder holds it
            if "concurrent update" not in str(exc):
                raise
            raise _lost(self.url, self.scope, self.home, _TAKEN) from None
        row = cursor.fetchone()
        if row is None or int(row[0]) != self.token:
            now = "none" if row is None else row[0]
            why = f"{_TAKEN} (its fencing token is {now}, this holder's {self.token})"
            raise _lost(self.url, self.scope, self.home, why)


_TAKEN = "another holder took it since this one did"


def _lost(url: str, scope: str, home: Path, why: str) -> LockLostError:
    error = LockLostError(
        f"lost the lock of {_subject(scope, home)} in the registry database {redact(url)}: {why}, so another "
        "process may hold it now; nothing was published: run the step again"
    )
    error.add_note(
        "a registry database's advisory lock ends with the session that took it: the database "
        "restarted, or the session was terminated (pg_terminate_backend)"
    )
    return error


def _release(cur: Any, give: str, key: int) -> None:
    """Give an advisory lock back. A session whose connection is gone (the database restarted)
    holds no lock any more: nothing to give back, and no error to put in place of what the
    holder raised or returned (the next registry operation names a database that is gone)."""
    import psycopg2

    try:
        cur.execute(f"SELECT {give}(%s)", (key,))
    except psycopg2.Error as exc:
        log.warning("the registry database's lock session ended before its release: %s", exc)


def _busy_across(
    cur: Any, key: int, url: str, scope: str, home: Path, purpose: str, wait_s: float
) -> HomeBusyError:
    cur.execute(
        "SELECT a.application_name, a.client_addr FROM pg_locks l"
        " JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
        " AND l.classid = %s AND l.objid = %s",
        _halves(key),
    )
    row = cur.fetchone()
    who = f"{row[0]}{f' from {row[1]}' if row[1] else ''}" if row else "another process"
    waited = f" after waiting {wait_s:g} s" if wait_s > 0 else ""
    what = (
        "holds the home (a run, a sync, a compaction)"
        if scope in (HOME_SCOPE, HOME_GATE)
        else f"writes {scope}"
    )
    error = HomeBusyError(
        f"{_subject(scope, home)} is busy{waited}: {who} holds its lock in {redact(url)}"
    )
    error.add_note(
        f"a process sharing the registry (on this machine or another) {what} ("
        f"{purpose} was asked); wait for it to finish, then try again"
    )
    return error


def take_flock(fd: int, mode: int, deadline: float, poll_s: float = POLL_S) -> bool:
    """Take ``fd``'s flock in ``mode`` (``fcntl.LOCK_EX``, ``LOCK_SH``), polling every
    ``poll_s`` until ``deadline`` (``time.monotonic()``); False when another holder kept it
    past then."""
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)


@contextlib.contextmanager
def _flock(
    path: Path,
    home: Path,
    purpose: str,
    wait_s: float,
    *,
    shared: bool = False,
    what: str = "home",
    deadline: float | None = None,
) -> Iterator[None]:
    """Hold ``path``'s flock, waiting up to ``wait_s`` (until ``deadline`` when given: what is
    left of a wait begun before, the message still naming ``wait_s``)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if deadline is None:
            deadline = time.monotonic() + max(wait_s, 0.0)
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        if not take_flock(fd, mode, deadline):
            raise _busy(home, purpose, wait_s, path=path, what=what)
        os.ftruncate(fd, 0)  # shared: a line left there is a killed holder's
        if not shared:
            os.write(fd, f"pid {os.getpid()} ({purpose})\n".encode())
        try:
            yield
        finally:
            if not shared:
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _busy(
    home: Path, purpose: str, wait_s: float, *, path: Path, what: str = "home"
) -> HomeBusyError:
    try:
        who = path.read_text(encoding="utf-8").strip()
    except OSError:
        who = ""
    who = who or "another process (a run sharing the home, or one that names no holder)"
    waited = f" after waiting {wait_s:g} s" if wait_s > 0 else ""
    subject = f"home {home}" if what == "home" else f"{what} {home}"
    error = HomeBusyError(f"{subject} is busy{waited}: {who} holds {path}")
    error.add_note(
        f"a sync, promotion or pipeline run of one home runs one at a time ({purpose} was "
        "asked); "
        "wait for that process to finish, then try again (`corpus sync --wait SECONDS` waits)"
    )
    return error
