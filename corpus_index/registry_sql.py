"""Where the registry's tables live: a DuckDB file or a PostgreSQL database.

The registry (``corpus_index.registry``) and the query traces (``corpus_index.traces``) speak
one SQL: ``?`` placeholders, ``BEGIN TRANSACTION``/``COMMIT``/``ROLLBACK``, ``JSON`` columns
holding text, ``INSERT ... ON CONFLICT (key) DO UPDATE``. What differs between the two
databases is kept here, and only here:

- DuckDB allows one writing process per file: every unit of work opens the file and closes it
  (the open is the lock), retried while another process holds it. A read that finds the file
  shorter than its header says (``Could not read enough bytes``) happens, rarely, just after
  another process let go of it; the whole operation runs again, up to five times in under a
  second, and only a file still short after that is reported damaged (a truncated registry
  fails the same way every time).
- PostgreSQL lets many processes write: every unit of work is ONE transaction at SERIALIZABLE
  isolation on a connection kept per thread, committed when the unit ends. A transaction that
  loses a race with another process fails with a serialization failure, raised here as
  ``RegistryConflictError``; ``retry_conflicts`` runs the whole operation again. So it does,
  once, on a new connection, when the connection kept from an earlier unit of work is found
  lost (the database restarted) before the unit committed anything. A transaction
  that wrote confirms the locks its thread holds (``held_locks``: the advisory locks of this
  database) before it commits, so a step that lost its lock changes nothing here either; and,
  as its last statement, checks each lock's fencing token in ``lock_fences`` (bumped by every
  exclusive taker of the lock) under a row lock, so a holder paused between the confirmation
  and the commit while the lock passed on cannot commit: the check refuses it, or the next
  taker waits for the commit before it holds the lock.
  Placeholders become ``%s``, ``JSON`` columns are read back as the text that was written,
  ``VARCHAR`` columns compare bytewise (``COLLATE "C"``, as DuckDB does) and timestamps are in
  UTC.

Both record the schema version (``registry_schema``) when they create the tables, and refuse a
database written by a newer version. On PostgreSQL, tables that exist already are not created
again (``CREATE ... IF NOT EXISTS`` needs CREATE on the schema even then), so a user who may
only read and write them uses tables another user created.
"""

from __future__ import annotations

import functools
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

import duckdb

from corpus_index.errors import (
    DamagedRegistryError,
    PermanentError,
    RegistryConflictError,
    RetryableError,
)
from corpus_index.held_locks import check_fences, confirm_held

# the layout of the registry's own tables; bump when a migration is needed
REGISTRY_SCHEMA_VERSION = 1
# "postgresql+psycopg2" is SQLAlchemy's spelling, which CORPUS_DAGSTER_POSTGRES_URL needs: the
# same URL may name both databases; libpq is given it as plain postgresql://
POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg2")

_SCHEMA_DDL = "CREATE TABLE IF NOT EXISTS registry_schema (version INTEGER NOT NULL)"
# PostgreSQL: concurrent CREATE TABLE IF NOT EXISTS can collide in the catalog; schema
# creation takes this transaction-level advisory lock first
_SCHEMA_LOCK = 0x636F7270  # "corp"

# PostgreSQL: the fencing token of each lock held in the database (``homelock``), by its
# advisory key; every exclusive taker bumps it, and a transaction that writes checks, before it
# commits, that the tokens of its thread's locks are still the ones their holder took
FENCES_DDL = (
    "CREATE TABLE IF NOT EXISTS lock_fences (lock_key BIGINT PRIMARY KEY,"
    " token BIGINT NOT NULL, exclusive BOOLEAN NOT NULL)"
)

F = TypeVar("F", bound=Callable[..., Any])


class Connection(Protocol):
    """One unit of work on the registry's database."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Any: ...


def is_database_url(location: object) -> bool:
    """Whether ``location`` is a ``postgresql://`` URL (anything else is a DuckDB file path)."""
    return isinstance(location, str) and urlsplit(location).scheme in POSTGRES_SCHEMES


def libpq_url(url: str) -> str:
    """``url`` as libpq reads it: SQLAlchemy's ``postgresql+psycopg2://`` as ``postgresql://``."""
    scheme, sep, rest = url.partition("://")
    return f"postgresql{sep}{rest}" if scheme == "postgresql+psycopg2" else url


def redact(url: str) -> str:
    """``url`` without its password, for messages and logs: the one after the user name and
    a ``password=`` query parameter (libpq takes either)."""
    parts = urlsplit(url)
    if parts.password is not None:
        host = parts.hostname or ""
        netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
        parts = parts._replace(netloc=netloc)
    if parts.query:
        query = re.sub(r"(?i)((?:^|&)password=)[^&]*", r"\1***", parts.query)
        parts = parts._replace(query=query)
    return urlunsplit(parts)


def in_list(values: Sequence[object]) -> str:
    """``(?, ?, ...)`` for ``column IN`` one placeholder per value (never an empty list)."""
    if not values:
        raise ValueError("in_list needs at least one value")
    return "(" + ", ".join("?" for _ in values) + ")"


def upsert(table: str, columns: Sequence[str], key: str) -> str:
    """An INSERT of ``columns`` that replaces the row with the same ``key``."""
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c != key)
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)}) "
        f"ON CONFLICT ({key}) DO UPDATE SET {updates}"
    )


# a DuckDB read that found the file short: tries of the whole operation before the file is
# taken for damaged, the first wait between them (doubled each time: 0.05 + ... + 0.8 s)
SHORT_READ_TRIES = 5
SHORT_READ_DELAY_S = 0.05


class ShortReadError(RegistryConflictError):
    """A DuckDB read found the registry file shorter than it should be: another process had
    just let go of it (an operation run again succeeds) or the file is truncated (it fails
    every time; :func:`retry_conflicts` reports it as damaged after ``SHORT_READ_TRIES``)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def retry_conflicts(fn: F) -> F:
    """Run a registry operation again when its transaction lost a race with another process
    (``RegistryConflictError``), with backoff, for up to the object's ``lock_timeout_s``; a
    short read of the DuckDB file (:class:`ShortReadError`) at most ``SHORT_READ_TRIES``
    times, then ``DamagedRegistryError``."""

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + float(self.lock_timeout_s)
        delay = 0.01
        short_reads = 0
        while True:
            try:
                return fn(self, *args, **kwargs)
            except ShortReadError as exc:
                short_reads += 1
                if short_reads >= SHORT_READ_TRIES:
                    raise DamagedRegistryError("the registry", exc.path, exc.reason) from None
                time.sleep(SHORT_READ_DELAY_S * 2 ** (short_reads - 1))
            except RegistryConflictError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    return wrapper  # type: ignore[return-value]


class KeptConnectionLostError(RegistryConflictError):
    """The connection a thread kept from an earlier unit of work was found lost (the database
    restarted, or ended the session) before the unit committed anything: the transaction was
    rolled back by the server, and :func:`retry_conflicts` runs the operation again on a new
    connection."""


class DuckDBBackend:
    """``registry.duckdb``: one short connection per unit of work."""

    def __init__(self, path: Path, *, ddl: Sequence[str], lock_timeout_s: float) -> None:
        self.path = Path(path)
        self.ddl = tuple(ddl)
        self.location = str(self.path)
        self.lock_timeout_s = lock_timeout_s
        self._created: set[str] = set()

    @contextmanager
    def connect(
        self, extra: Sequence[str] = (), *, wait_s: float | None = None
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        """One connection for one short unit of work; retried while another process holds the
        lock, for ``wait_s`` at most (default: the backend's lock timeout)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + (self.lock_timeout_s if wait_s is None else wait_s)
        delay = 0.05
        while True:
            try:
                con = duckdb.connect(str(self.path))
                break
            except duckdb.Error as exc:
                _raise_short_read(exc, self.path)
                if "lock" not in str(exc).lower():
                    raise DamagedRegistryError(
                        "the registry", self.path, str(exc).splitlines()[0]
                    ) from None
                if time.monotonic() > deadline:
                    raise RetryableError(f"{self.path}: registry is busy: {exc}") from exc
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        try:
            missing = [d for d in (*self.ddl, *extra) if d not in self._created]
            if missing:
                _create(con, missing, self.location)
                self._created.update(missing)
            yield con
        except duckdb.IOException as exc:
            _raise_short_read(exc, self.path)
            raise
        except (duckdb.InternalException, duckdb.SerializationException) as exc:
            # a file that opens but whose blocks are garbage fails on first read
            raise DamagedRegistryError(
                "the registry", self.path, str(exc).splitlines()[0]
            ) from None
        finally:
            con.close()

    def active_state(self, namespace: str) -> tuple[object, ...]:
        """The registry file's and its WAL's size, mtime and inode: every commit, by this
        process or another, appends to the WAL or checkpoints into the file. No database read."""
        state: list[int] = []
        for path in (self.path, self.path.with_name(self.path.name + ".wal")):
            try:
                st = path.stat()
            except FileNotFoundError:
                state += [-1, -1, -1]
            else:
                state += [st.st_size, st.st_mtime_ns, st.st_ino]
        return tuple(state)

    def tombstones_state(self) -> tuple[object, ...]:
        return self.active_state("")

    def generation_state(self, generation_id: str) -> tuple[object, ...]:
        """As :meth:`active_state`: every commit changes the files. No database read."""
        return self.active_state("")


def _raise_short_read(exc: duckdb.Error, path: Path) -> None:
    """:class:`ShortReadError` for a DuckDB error that says the file was shorter than read
    (nothing for any other error)."""
    if isinstance(exc, duckdb.IOException) and "could not read enough bytes" in str(exc).lower():
        raise ShortReadError(path, str(exc).splitlines()[0]) from None


# connections a forked child inherited: closing one would end the parent's session, so they
# are kept, unused, for the child's lifetime
_INHERITED: list[Any] = []


class PostgresBackend:
    """A PostgreSQL database: one SERIALIZABLE transaction per unit of work."""

    def __init__(self, url: str, *, ddl: Sequence[str], lock_timeout_s: float) -> None:
        self.url = url
        self.ddl = (*ddl, FENCES_DDL)  # made with the registry's, so its users' grants cover it
        self.location = redact(url)
        self.lock_timeout_s = lock_timeout_s
        self._created: set[str] = set()
        self._local = threading.local()

    def _raw(self) -> tuple[Any, bool]:
        """This thread's connection, and whether it was kept from an earlier unit of work."""
        import psycopg2
        import psycopg2.extras

        raw = getattr(self._local, "raw", None)
        if raw is not None and self._local.pid != os.getpid():
            _INHERITED.append(raw)
            raw = None
        kept = raw is not None and not raw.closed
        if not kept:
            raw = self._open()
            raw.set_session(isolation_level="SERIALIZABLE", autocommit=False)
            # JSON columns come back as the text that was written, as DuckDB returns them
            psycopg2.extras.register_default_json(raw, loads=_text)
            psycopg2.extras.register_default_jsonb(raw, loads=_text)
            self._local.raw = raw
            self._local.pid = os.getpid()
        return raw, kept

    def _open(self) -> Any:
        """A new connection to the database (statements wait ``lock_timeout_s`` for a lock)."""
        import psycopg2

        timeout_ms = max(1, int(self.lock_timeout_s * 1000))
        try:
            return psycopg2.connect(
                libpq_url(self.url),
                connect_timeout=max(1, int(self.lock_timeout_s)),
                application_name="corpus-index registry",
                options=f"-c TimeZone=UTC -c lock_timeout={timeout_ms}",
            )
        except psycopg2.OperationalError as exc:
            raise RetryableError(
                f"{self.location}: cannot reach the registry database: "
                f"{str(exc).strip().splitlines()[0]}"
            ) from None

    def rewrite_table(self, table: str) -> str | None:
        """Rewrite ``table`` into new files (``VACUUM FULL``), so the bytes of the rows deleted
        from it leave the disk: PostgreSQL keeps a deleted row in its page until the space is
        reused (a plain VACUUM only marks it free), in the table's file as in its TOAST table's.
        None once rewritten; else why not (``VACUUM FULL`` needs the table's owner, and waits
        ``lock_timeout_s`` at most for the readers and writers of the table). Runs on a
        connection of its own: VACUUM cannot run inside a transaction.

        Raises:
            RetryableError: the database cannot be reached.
        """
        import psycopg2
        import psycopg2.errors

        if not re.fullmatch(r"[a-z_][a-z0-9_]*", table):
            raise ValueError(f"not a registry table name: {table!r}")
        raw = self._open()
        try:
            raw.autocommit = True
            with raw.cursor() as cur:
                cur.execute(
                    "SELECT pg_has_role(relowner, 'USAGE'), pg_get_userbyid(relowner)"
                    " FROM pg_class WHERE oid = to_regclass(%s)",
                    (table,),
                )
                found = cur.fetchone()
                if found is None:
                    return f"{self.location}: no table {table}"
                if not found[0]:
                    return (
                        f"VACUUM FULL {table} needs the table's owner ({found[1]}), "
                        "not this registry's user: run it as the owner"
                    )
                cur.execute(f"VACUUM FULL {table}")
        except psycopg2.errors.LockNotAvailable:
            return f"{table} stayed in use past {self.lock_timeout_s:g} s: run VACUUM FULL {table}"
        except psycopg2.OperationalError as exc:
            raise RetryableError(f"{self.location}: lost the registry database: {exc}") from exc
        finally:
            raw.close()
        return None

    def file_node(self, table: str) -> int | None:
        """The file node of ``table`` (a rewrite gives it a new one); None without the table."""
        with self.connect() as con:
            (node,) = con.execute("SELECT pg_relation_filenode(to_regclass(?))", [table]).fetchone()
        return None if node is None else int(node)

    @contextmanager
    def connect(
        self, extra: Sequence[str] = (), *, wait_s: float | None = None
    ) -> Iterator[_PostgresConnection]:
        """One transaction: committed when the block ends, rolled back when it raises
        (``wait_s``: as DuckDB's; a reader here never waits on a writer)."""
        import psycopg2
        import psycopg2.errors

        raw, kept = self._raw()
        con = _PostgresConnection(raw, self.url)
        creating = False
        try:
            missing = [d for d in (*self.ddl, *extra) if d not in self._created]
            if missing:
                # tables another user created are used as they are: CREATE ... IF NOT EXISTS
                # needs CREATE on the schema even where the table exists
                if _exist(con, [_SCHEMA_DDL, *missing]):
                    _check_version(con, self.location)
                else:
                    creating = True
                    con.execute("SELECT pg_advisory_xact_lock(?)", [_SCHEMA_LOCK])
                    _create(con, [_postgres_ddl(d) for d in missing], self.location)
                    creating = False
                raw.commit()
                self._created.update(missing)
            yield con
            con.commit()
        except BaseException as exc:
            with suppress(psycopg2.InterfaceError, psycopg2.OperationalError):
                raw.rollback()  # a lost connection has nothing to roll back
            if isinstance(exc, psycopg2.errors.InsufficientPrivilege):
                raise self._refused(exc, creating=creating) from None
            if isinstance(
                exc, psycopg2.errors.SerializationFailure | psycopg2.errors.DeadlockDetected
            ):
                raise RegistryConflictError(
                    f"{self.location}: another process changed the registry at the same time"
                ) from exc
            if isinstance(exc, psycopg2.errors.LockNotAvailable):
                raise RetryableError(f"{self.location}: registry is busy: {exc}") from exc
            if isinstance(exc, psycopg2.OperationalError | psycopg2.InterfaceError):
                lost = bool(raw.closed)  # not a statement's own failure (a timeout, say)
                self._local.raw = None
                with suppress(psycopg2.Error):
                    raw.close()
                if lost and kept and not con.committed:
                    raise KeptConnectionLostError(
                        f"{self.location}: the registry connection was lost: {str(exc).strip()}"
                    ) from exc
                raise RetryableError(
                    f"{self.location}: lost the registry database: {str(exc).strip()}"
                ) from exc
            raise

    def _refused(self, exc: BaseException, *, creating: bool) -> PermanentError:
        """The PermanentError for a privilege the database's user lacks, naming the grant."""
        user = urlsplit(self.url).username or "the user"
        reason = str(exc).strip().splitlines()[0]
        if creating:
            need = (
                f"{user} may not create the registry's tables ({reason}): grant it "
                f"CREATE on the schema (GRANT CREATE ON SCHEMA public TO {user}), or create "
                "them once as a user who may"
            )
        else:
            need = (
                f"{user} may not use the registry's tables ({reason}): grant it SELECT, "
                f"INSERT, UPDATE and DELETE on them and USAGE on query_trace_seq"
            )
        return PermanentError(f"{self.location}: {need}")

    def active_state(self, namespace: str) -> tuple[object, ...]:
        """The pointer row's and the ACTIVE generation's ``updated_at``: every pointer move
        and every change of the generation's record sets them (one indexed read; what the
        cache saves is reading and decoding the record)."""
        with self.connect() as con:
            row = con.execute(
                "SELECT p.generation, p.updated_at, g.updated_at FROM active_pointers p "
                "LEFT JOIN generations g ON g.id = p.generation WHERE p.namespace = ?",
                [namespace],
            ).fetchone()
        return tuple(row) if row else ()

    def generation_state(self, generation_id: str) -> tuple[object, ...]:
        """The generation record's ``updated_at``: every change of it sets it (one indexed
        read)."""
        with self.connect() as con:
            row = con.execute(
                "SELECT updated_at FROM generations WHERE id = ?", [generation_id]
            ).fetchone()
        return tuple(row) if row else ()

    def tombstones_state(self) -> tuple[object, ...]:
        """How many tombstones and the newest ``removed_at``: adding one (or removing a source
        again) sets ``removed_at`` to now, lifting one lowers the count."""
        with self.connect() as con:
            row = con.execute("SELECT count(*), max(removed_at) FROM tombstones").fetchone()
        return tuple(row)


class _PostgresConnection:
    """The registry's SQL on a psycopg2 connection, inside the unit of work's transaction."""

    def __init__(self, raw: Any, url: str) -> None:
        self.raw = raw
        self.url = url
        self.cursor = raw.cursor()
        self.wrote = False  # whether the open transaction ran anything but a SELECT
        # whether a commit was sent (one lost on its way may have committed: not run again)
        self.committed = False

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> Any:
        verb = sql.strip().upper()
        if verb in ("BEGIN", "BEGIN TRANSACTION"):
            return self.cursor  # the unit of work is already one transaction
        if verb == "COMMIT":
            self.commit()
            return self.cursor
        if verb == "ROLLBACK":
            self.raw.rollback()
            self.wrote = False
            return self.cursor
        if not verb.startswith("SELECT"):
            self.wrote = True
        self.cursor.execute(_postgres_sql(sql), list(params))
        return self.cursor

    def commit(self) -> None:
        """Commit the transaction; one that wrote confirms the thread's locks first, then
        checks their fencing tokens inside it (:func:`~corpus_index.held_locks.check_fences`).

        Raises:
            LockLostError: a lock the thread holds was lost, or taken since by another
                holder (the caller rolls back).
        """
        if self.wrote:
            confirm_held()
            check_fences(self.cursor, self.url)
        self.committed = True
        self.raw.commit()
        self.wrote = False


@functools.lru_cache(maxsize=512)
def _postgres_sql(sql: str) -> str:
    # the registry's SQL holds no '?' or '%' inside literals: placeholders are the only ones
    return sql.replace("%", "%%").replace("?", "%s")


def _postgres_ddl(sql: str) -> str:
    return re.sub(r"\bVARCHAR\b", 'VARCHAR COLLATE "C"', sql)


def _text(value: str) -> str:
    return value


# the table or sequence a DDL statement creates
_CREATED_NAME = re.compile(r"CREATE\s+(?:TABLE|SEQUENCE)\s+IF\s+NOT\s+EXISTS\s+(\w+)", re.I)


def _exist(con: Any, ddl: Sequence[str]) -> bool:
    """Whether every table and sequence ``ddl`` creates exists already (PostgreSQL)."""
    names = [_CREATED_NAME.match(d.strip()) for d in ddl]
    if not all(names):
        return False
    (found,) = con.execute(
        "SELECT bool_and(to_regclass(n) IS NOT NULL) FROM unnest(?::text[]) AS n",
        [[m.group(1) for m in names if m]],
    ).fetchone()
    return bool(found)


def _create(con: Any, ddl: Sequence[str], location: str) -> None:
    """Create the tables and record (or check) the schema version."""
    con.execute(_SCHEMA_DDL)
    for statement in ddl:
        con.execute(statement)
    _check_version(con, location)


def _check_version(con: Any, location: str) -> None:
    """Record the schema version in a new registry; refuse one a newer version wrote."""
    (found,) = con.execute("SELECT max(version) FROM registry_schema").fetchone()
    if found is None:
        con.execute("INSERT INTO registry_schema VALUES (?)", [REGISTRY_SCHEMA_VERSION])
    elif int(found) > REGISTRY_SCHEMA_VERSION:
        raise PermanentError(
            f"{location}: the registry's schema is version {found}, newer than this "
            f"corpus-index reads ({REGISTRY_SCHEMA_VERSION}): upgrade corpus-index"
        )


def ensure_fences(cursor: Any) -> None:
    """Create ``lock_fences`` in the database of ``cursor`` (a psycopg2 cursor of a session
    in autocommit) where it is missing; one made already is used as it is (see
    :class:`PostgresBackend`)."""
    cursor.execute("SELECT to_regclass('lock_fences') IS NOT NULL")
    if cursor.fetchone()[0]:
        return
    cursor.execute("BEGIN")
    try:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        cursor.execute(FENCES_DDL)
    except BaseException:
        cursor.execute("ROLLBACK")
        raise
    cursor.execute("COMMIT")


def open_backend(
    location: Path | str, *, ddl: Sequence[str], lock_timeout_s: float
) -> DuckDBBackend | PostgresBackend:
    """The backend ``location`` names (a ``postgresql://`` URL, else a DuckDB file path),
    creating the tables ``ddl`` declares on first use."""
    if is_database_url(location):
        return PostgresBackend(str(location), ddl=ddl, lock_timeout_s=lock_timeout_s)
    return DuckDBBackend(Path(location), ddl=ddl, lock_timeout_s=lock_timeout_s)
