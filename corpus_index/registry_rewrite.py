"""Rewriting a DuckDB registry into a fresh file, so that no byte of a deleted row stays in it.

DuckDB marks the blocks a DELETE frees as free, and overwrites them only when it reuses them: a
query trace a deletion took out (``TraceStore.forget``), or one pruned earlier, stays in the
bytes of ``registry.duckdb``, where ``corpus audit-deletion`` finds it. ``rewrite`` copies every
table, sequence and index into a new file beside it (``COPY FROM DATABASE``, which copies live
rows only), checks that each table holds as many rows there and that each sequence will hand out
the same next value (setting it where the copy did not carry it), syncs the new file to disk and
renames it over the registry.

The whole rewrite runs on one connection to the registry, which is DuckDB's lock on the file:
no other process writes between the copy and the rename, and one waiting for the lock opens the
path again, so it opens the new file. The registry is checkpointed first and its WAL must then be
empty, so the new file never replays the old file's log. A PostgreSQL registry is not a file of
the home: nothing is rewritten there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corpus_index.errors import RetryableError
from corpus_index.predicates import literal
from corpus_index.registry import Registry
from corpus_index.registry_sql import DuckDBBackend

FRESH = "rewritten"  # the new file's name while attached


@dataclass(frozen=True, slots=True)
class Rewritten:
    """What a rewrite copied: rows per table, and the file's size before and after."""

    path: str
    rows: dict[str, int]
    bytes_before: int
    bytes_after: int

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "rows": self.rows,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
        }


def wal_of(path: Path) -> Path:
    """The write-ahead log DuckDB keeps beside the database file ``path``."""
    return path.with_name(path.name + ".wal")


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _tables(con: Any, database: str) -> list[tuple[str, str]]:
    rows = con.execute(
        "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = ? "
        "AND NOT temporary ORDER BY 1, 2",
        [database],
    ).fetchall()
    return [(str(s), str(t)) for s, t in rows]


def _sequences(con: Any, database: str) -> dict[tuple[str, str], tuple[int, ...]]:
    """Per sequence: the value ``nextval`` gives next, its increment, bounds and cycling."""
    rows = con.execute(
        "SELECT schema_name, sequence_name, start_value, increment_by, last_value, min_value, "
        "max_value, cycle FROM duckdb_sequences() WHERE database_name = ? AND NOT temporary",
        [database],
    ).fetchall()
    out: dict[tuple[str, str], tuple[int, ...]] = {}
    for schema, name, start, step, last, low, high, cycle in rows:
        after = int(start) if last is None else int(last) + int(step)
        out[(str(schema), str(name))] = (after, int(step), int(low), int(high), int(cycle))
    return out


def _carry_sequences(con: Any, database: str) -> None:
    """Make each sequence of the new file hand out what the registry's would next (a DuckDB
    whose ``COPY FROM DATABASE`` starts sequences over is set right here)."""
    fresh = _sequences(con, FRESH)
    for (schema, name), (after, step, low, high, cycle) in _sequences(con, database).items():
        if fresh.get((schema, name), (None,))[0] == after:
            continue
        qualified = f"{FRESH}.{_ident(schema)}.{_ident(name)}"
        con.execute(f"DROP SEQUENCE IF EXISTS {qualified}")
        con.execute(
            f"CREATE SEQUENCE {qualified} START {after} INCREMENT BY {step} "
            f"MINVALUE {low} MAXVALUE {high}{' CYCLE' if cycle else ''}"
        )
    if (fresh := _sequences(con, FRESH)) != _sequences(con, database):
        raise RetryableError(
            f"the rewritten registry's sequences differ from the registry's ({fresh}); "
            "the registry was left as it was"
        )


def _copy(con: Any, database: str, fresh: Path) -> dict[str, int]:
    """Copy ``database`` into ``fresh`` and check it; rows per table."""
    con.execute(f"ATTACH {literal(str(fresh))} AS {FRESH}")
    try:
        con.execute(f"COPY FROM DATABASE {_ident(database)} TO {FRESH}")
        _carry_sequences(con, database)
        rows: dict[str, int] = {}
        tables = _tables(con, database)
        if _tables(con, FRESH) != tables:
            raise RetryableError(
                f"{fresh}: the copy holds the tables {_tables(con, FRESH)}, the registry "
                f"{tables}; the registry was left as it was"
            )
        for schema, table in tables:
            name = f"{_ident(schema)}.{_ident(table)}"
            sql = f"SELECT (SELECT count(*) FROM {_ident(database)}.{name}), "  # noqa: S608
            sql += f"(SELECT count(*) FROM {FRESH}.{name})"  # noqa: S608 - names from the catalog
            had, has = con.execute(sql).fetchone()
            if had != has:
                raise RetryableError(
                    f"{fresh}: the copy of {table} holds {has} rows, the registry {had}; "
                    "the registry was left as it was"
                )
            rows[table] = int(had)
        con.execute(f"CHECKPOINT {FRESH}")
    finally:
        con.execute(f"DETACH {FRESH}")
    return rows


def rewrite(registry: Registry) -> Rewritten | None:
    """Rewrite ``registry``'s DuckDB file into a fresh one holding only its live rows, in
    place; None for a PostgreSQL registry or one with no file yet.

    Raises:
        RetryableError: the registry stayed locked by another process past its timeout, its
            WAL stayed behind a checkpoint, or the copy did not match it (the registry is then
            left as it was, and a partial copy removed).
    """
    backend = registry.backend
    if not isinstance(backend, DuckDBBackend) or not backend.path.is_file():
        return None
    path = backend.path
    fresh = path.with_name(path.name + ".rewrite.tmp")
    with backend.connect() as con:
        # left by a rewrite that crashed: only this rewrite makes them, and it holds the lock
        for leftover in (fresh, wal_of(fresh)):
            leftover.unlink(missing_ok=True)
        con.execute("FORCE CHECKPOINT")
        wal = wal_of(path)
        if wal.exists() and wal.stat().st_size:
            raise RetryableError(
                f"{wal}: the registry's log is not empty after a checkpoint; the registry "
                "was not rewritten (run the compaction again)"
            )
        (database,) = con.execute("SELECT current_database()").fetchone() or ("",)
        before = path.stat().st_size
        try:
            rows = _copy(con, str(database), fresh)
            if wal_of(fresh).exists() and wal_of(fresh).stat().st_size:
                raise RetryableError(f"{wal_of(fresh)}: the copy's log was not checkpointed")
            _sync(fresh)
            # renamed while the old file is still open (locked): a writer waiting for the lock
            # opens the path again, and finds the new file
            os.replace(fresh, path)
            _sync(path.parent)
        except BaseException:
            for partial in (fresh, wal_of(fresh)):
                partial.unlink(missing_ok=True)
            raise
    return Rewritten(str(path), rows, before, path.stat().st_size)
