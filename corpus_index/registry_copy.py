"""Moving a registry into another database (``corpus registry copy --to URL``): every row of
every registry table, the query traces included (kept in ``traces.duckdb`` beside a DuckDB
registry), written in one transaction on the target."""

from __future__ import annotations

from typing import Any

from corpus_index.errors import PermanentError
from corpus_index.registry import Registry
from corpus_index.traces import TRACE_DDL, TraceStore

TABLES = (
    "generations",
    "active_pointers",
    "pointer_history",
    "tombstones",
    "stale_sources",
    "dataset_evals",
    "home_keys",
    "query_traces",
)


def copy_registry(source: Registry, target: Registry) -> dict[str, int]:
    """Copy ``source`` into ``target``, which must hold no rows yet; returns rows per table.

    The source is read in one unit of work (on DuckDB, under its lock), so stop the writers
    (syncs, the daemon, `corpus serve`) first: what they commit afterwards is not copied.

    Raises:
        PermanentError: the target already holds rows (a copy never merges two registries).
    """
    read: dict[str, tuple[list[str], list[Any]]] = {}
    with source.connect() as con:
        for table in TABLES[:-1]:
            cur = con.execute(f"SELECT * FROM {table}")  # noqa: S608 - fixed table names
            read[table] = ([d[0] for d in cur.description], cur.fetchall())
    with TraceStore(source).connect() as con:
        cur = con.execute("SELECT * FROM query_traces")
        read["query_traces"] = ([d[0] for d in cur.description], cur.fetchall())
    with target.connect(TRACE_DDL) as con:
        con.execute("BEGIN TRANSACTION")
        for table in TABLES:
            (held,) = con.execute(f"SELECT count(*) FROM {table}").fetchone()  # noqa: S608
            if held:
                con.execute("ROLLBACK")
                raise PermanentError(
                    f"{target.location}: the target registry is not empty ({held} rows in "
                    f"{table}); copy into a new, empty database"
                )
        for table, (columns, rows) in read.items():
            insert = (
                f"INSERT INTO {table} ({', '.join(columns)}) "  # noqa: S608
                f"VALUES ({', '.join('?' for _ in columns)})"
            )
            for row in rows:
                con.execute(insert, list(row))
        # the next trace continues after the copied ones
        traces_cols, traces = read["query_traces"]
        seq = traces_cols.index("seq")
        start = max((int(r[seq]) for r in traces), default=0) + 1
        con.execute("DROP SEQUENCE IF EXISTS query_trace_seq")
        con.execute(f"CREATE SEQUENCE query_trace_seq START {start}")
        con.execute("COMMIT")
    return {table: len(rows) for table, (_, rows) in read.items()}
