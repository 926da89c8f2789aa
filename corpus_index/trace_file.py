"""The query traces of a home whose registry is a DuckDB file: ``<home>/traces.duckdb``, a file
of their own that a deletion rewrites.

DuckDB marks the blocks a DELETE frees as free and overwrites them only when it reuses them, so
a trace a deletion takes out stays in the bytes of the file that held it. The traces are kept
out of ``registry.duckdb``, and :meth:`TraceFile.rewrite` copies the live ones into a fresh
file, synced and renamed over the old one. Every process opens the traces file only while it
holds the flock of ``<home>/traces.duckdb.lock``, and a rewrite holds it from its read to the
rename: no process has the old file open when it goes, and one waiting for the lock opens the
new file, whole. (Renaming a DuckDB file that other processes have open, the registry, made a
process waiting on it read a short file.)

A home made before keeps its traces in ``registry.duckdb``'s ``query_traces``: the first use
moves them into the traces file, drops the table and its sequence from the registry, and fills
the blocks that freed with random bytes (a table written, checkpointed and dropped), so DuckDB,
the one writing the registry, overwrites them in place.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from corpus_index.errors import RetryableError
from corpus_index.homelock import take_flock
from corpus_index.registry_sql import DuckDBBackend

TRACES_FILE = "traces.duckdb"
TABLE = "query_traces"
SEQUENCE = "query_trace_seq"

TRACE_DDL = (
    f"CREATE SEQUENCE IF NOT EXISTS {SEQUENCE} START 1",
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
        seq BIGINT PRIMARY KEY,
        recorded_at TIMESTAMPTZ NOT NULL,
        kind VARCHAR NOT NULL,
        tenant VARCHAR NOT NULL,
        groups JSON NOT NULL,
        query VARCHAR NOT NULL,
        namespace VARCHAR,
        generation VARCHAR,
        mode VARCHAR,
        k INTEGER,
        hits INTEGER NOT NULL,
        total_ms DOUBLE PRECISION,
        trace JSON NOT NULL
    )""",
)

# rows of 32 hex digits: DuckDB stores one in about 16 bytes, so a filler of this many rows a
# free byte covers the freed blocks whatever it compresses
_FILL_ROWS_PER_BYTE = 1 / 8


def _next_value(con: Any) -> int | None:
    """The value the traces' sequence of ``con``'s database hands out next (None: none)."""
    row = con.execute(
        "SELECT start_value, increment_by, last_value FROM duckdb_sequences() "
        "WHERE sequence_name = ? AND database_name = current_database()",
        [SEQUENCE],
    ).fetchone()
    if row is None:
        return None
    start, step, last = row
    return int(start) if last is None else int(last) + int(step)


def _has_table(con: Any) -> bool:
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = ? "
        "AND database_name = current_database()",
        [TABLE],
    ).fetchone()
    return bool(row and row[0])


def _read(con: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
    cur = con.execute(f"SELECT * FROM {TABLE} ORDER BY seq")  # noqa: S608 - a fixed name
    return [d[0] for d in cur.description], cur.fetchall()


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _scrub(con: Any) -> None:
    """Overwrite the blocks of ``con``'s database that DuckDB marks free: a table of random
    bytes as large as they are is checkpointed into them, then dropped."""
    con.execute("FORCE CHECKPOINT")
    free, block = con.execute(
        "SELECT free_blocks, block_size FROM pragma_database_size()"
    ).fetchone() or (0, 0)
    if not free:
        return
    rows = int(free * block * _FILL_ROWS_PER_BYTE) + 1
    con.execute(
        "CREATE TABLE trace_scrub AS SELECT md5(random()::VARCHAR) AS fill FROM range(?)", [rows]
    )
    con.execute("FORCE CHECKPOINT")
    con.execute("DROP TABLE trace_scrub")
    con.execute("FORCE CHECKPOINT")


class TraceFile:
    """``<home>/traces.duckdb`` beside a DuckDB registry, opened under its flock."""

    def __init__(self, registry_path: Path, *, lock_timeout_s: float) -> None:
        self.registry_path = Path(registry_path)
        self.path = self.registry_path.with_name(TRACES_FILE)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.lock_timeout_s = lock_timeout_s
        self._backend = DuckDBBackend(self.path, ddl=TRACE_DDL, lock_timeout_s=lock_timeout_s)
        self._moved = False

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the traces file's flock, waiting up to the lock timeout.

        Raises:
            RetryableError: another process held it past the timeout.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            # polled often: a lock taken often (each search records a trace) still lets it in
            deadline = time.monotonic() + self.lock_timeout_s
            if not take_flock(fd, fcntl.LOCK_EX, deadline, poll_s=0.02):
                raise RetryableError(
                    f"{self.path}: the query traces are busy: another process held "
                    f"{self.lock_path} for {self.lock_timeout_s} s"
                )
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One connection to the traces file for one short unit of work, under its flock; the
        traces an older home kept in the registry are moved in first.

        Raises:
            RetryableError: the traces file, or the registry holding traces to move, stayed
                busy past the lock timeout.
        """
        with self._locked():
            self._move_once()
            with self._backend.connect() as con:
                yield con

    def _move_once(self) -> None:
        if not self._moved:
            self._move_from_registry()
            self._moved = True

    def rewrite(self, drop: Callable[[str, str], bool]) -> int:
        """Copy the traces but those ``drop`` names (given each one's query and trace) into a
        fresh file renamed over the traces file, so that no byte of a dropped one, nor of one
        pruned before, stays in it; returns how many were dropped.

        Raises:
            RetryableError: the traces file stayed busy past the lock timeout.
        """
        with self._locked():
            self._move_once()
            with self._backend.connect() as con:
                columns, rows = _read(con)
                after = _next_value(con) or 1
            query, trace = columns.index("query"), columns.index("trace")
            kept = [row for row in rows if not drop(str(row[query]), str(row[trace]))]
            self._write_fresh(columns, kept, after)
        return len(rows) - len(kept)

    def _write_fresh(self, columns: Sequence[str], rows: Sequence[Any], after: int) -> None:
        """Write a traces file holding ``rows``, its sequence at ``after``, into a temporary
        file, then sync it and rename it over the traces file (the flock held)."""
        fresh = self.path.with_name(self.path.name + ".rewrite.tmp")
        wal = fresh.with_name(fresh.name + ".wal")
        for leftover in (fresh, wal):
            leftover.unlink(missing_ok=True)  # a rewrite cut short left it; we hold the lock
        try:
            con = duckdb.connect(str(fresh))
            try:
                con.execute(TRACE_DDL[1])
                con.execute(f"CREATE SEQUENCE {SEQUENCE} START {int(after)}")
                if rows:
                    con.executemany(
                        f"INSERT INTO {TABLE} ({', '.join(columns)}) "  # noqa: S608
                        f"VALUES ({', '.join('?' for _ in columns)})",
                        [list(row) for row in rows],
                    )
                con.execute("FORCE CHECKPOINT")
            finally:
                con.close()
            _sync(fresh)
            os.replace(fresh, self.path)
            _sync(self.path.parent)
        except BaseException:
            for partial in (fresh, wal):
                partial.unlink(missing_ok=True)
            raise

    def _move_from_registry(self) -> None:
        """Move the traces an older home kept in ``registry.duckdb`` into the traces file (the
        flock held); nothing when the registry holds none."""
        if not self.registry_path.is_file():
            return
        registry = DuckDBBackend(self.registry_path, ddl=(), lock_timeout_s=self.lock_timeout_s)
        with registry.connect() as con:
            if not _has_table(con):
                return
            columns, rows = _read(con)
            after = _next_value(con) or 1
            if self.path.is_file():
                # a move cut short after the traces file was written: keep what it holds too
                with self._backend.connect() as mine:
                    _, held = _read(mine)
                    after = max(after, _next_value(mine) or 1)
                seqs = {row[0] for row in rows}
                rows = sorted([*rows, *(r for r in held if r[0] not in seqs)], key=lambda r: r[0])
            self._write_fresh(columns, rows, after)
            con.execute("BEGIN TRANSACTION")
            con.execute(f"DROP TABLE {TABLE}")
            con.execute(f"DROP SEQUENCE IF EXISTS {SEQUENCE}")
            con.execute("COMMIT")
            _scrub(con)
