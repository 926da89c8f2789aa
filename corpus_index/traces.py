"""Query traces: what each search did and how long each stage took.

The last ``keep`` traces (default 1000) are kept in a ``query_traces`` table: in
``<home>/traces.duckdb`` beside a DuckDB registry (``corpus_index.trace_file``), or in the
PostgreSQL database of ``CORPUS_REGISTRY``. Older ones are pruned in the same short transaction
that inserts a new one, since DuckDB allows one writing process and neither file must be held
for long. A deletion takes out the traces whose query quotes the deleted source's words
(:meth:`TraceStore.forget`); beside a DuckDB registry the traces file is then rewritten, since
DuckDB keeps a deleted row's bytes in the block it frees.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from corpus_index.registry import Registry
from corpus_index.registry_sql import DuckDBBackend, PostgresBackend, retry_conflicts
from corpus_index.trace_file import TABLE as TRACES_TABLE
from corpus_index.trace_file import TRACE_DDL, TraceFile

__all__ = ["DEFAULT_KEEP", "TRACE_DDL", "TraceStore"]

DEFAULT_KEEP = 1000


class TraceStore:
    """Appends query traces to the registry and keeps only the newest ``keep``."""

    def __init__(self, registry: Registry, *, keep: int = DEFAULT_KEEP) -> None:
        """``registry``: a short ``lock_timeout_s`` (``open_registry(settings,
        lock_timeout_s=5)``) keeps a busy registry from holding up a search for long."""
        if keep < 1:
            raise ValueError(f"keep must be >= 1 (got {keep})")
        self.registry = registry
        self.keep = keep
        backend = registry.backend
        self.file = (
            TraceFile(backend.path, lock_timeout_s=registry.lock_timeout_s)
            if isinstance(backend, DuckDBBackend)
            else None
        )

    @contextmanager
    def connect(self) -> Iterator[Any]:
        """One connection to where the traces live, for one short unit of work.

        Raises:
            RetryableError: the traces file or the registry stayed busy past the timeout.
        """
        if self.file is not None:
            with self.file.connect() as con:
                yield con
        else:
            with self.registry.connect(TRACE_DDL) as con:
                yield con

    @property
    def lock_timeout_s(self) -> float:
        return self.registry.lock_timeout_s

    @retry_conflicts
    def record(
        self,
        *,
        query: str,
        tenant: str,
        groups: Sequence[str],
        trace: dict[str, Any],
        hits: int,
        kind: str = "search",
    ) -> int:
        """Store one trace; returns its sequence number.

        Raises:
            RetryableError: the registry stayed locked by another process past the timeout.
        """
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            (seq,) = con.execute("SELECT nextval('query_trace_seq')").fetchone() or (0,)
            con.execute(
                """INSERT INTO query_traces (seq, recorded_at, kind, tenant, groups, query,
                   namespace, generation, mode, k, hits, total_ms, trace)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                [
                    int(seq),
                    dt.datetime.now(dt.UTC),
                    kind,
                    tenant,
                    json.dumps(list(groups)),
                    query,
                    trace.get("namespace"),
                    trace.get("generation"),
                    trace.get("mode"),
                    trace.get("k"),
                    hits,
                    trace.get("total_ms"),
                    json.dumps(trace, default=str, sort_keys=True),
                ],
            )
            con.execute("DELETE FROM query_traces WHERE seq <= ?", [int(seq) - self.keep])
            con.execute("COMMIT")
        return int(seq)

    @retry_conflicts
    def forget(self, quotes: Callable[[str], bool]) -> int:
        """Delete the traces whose query or trace ``quotes`` says holds what must go (a
        deleted source's words: a query pasted from it); returns how many went.

        Raises:
            RetryableError: the registry stayed locked by another process past the timeout.
        """
        if self.file is not None:
            # a fresh file: DuckDB keeps a deleted row's bytes in the block it frees, and
            # those of the traces pruned before too
            return self.file.rewrite(lambda query, trace: quotes(query) or quotes(trace))
        with self.connect() as con:
            rows = con.execute("SELECT seq, query, trace FROM query_traces").fetchall()
            gone = [int(seq) for seq, query, trace in rows if quotes(query) or quotes(trace)]
            if gone:
                con.execute("BEGIN TRANSACTION")
                for seq in gone:
                    con.execute("DELETE FROM query_traces WHERE seq = ?", [seq])
                con.execute("COMMIT")
        return len(gone)

    def clear_pages(self) -> dict[str, Any]:
        """After :meth:`forget` took traces out of a PostgreSQL registry: the table rewritten,
        so the bytes of the traces that went leave its pages. ``{"pages": "rewritten"}``, or
        ``{"pages": "left", "why": ..., "file_node": N}`` where it could not be (the table's
        owner must rewrite it; an audit sees the file node change when it has); ``{}`` where
        the traces are a DuckDB file, which :meth:`forget` writes anew."""
        backend = self.registry.backend
        if not isinstance(backend, PostgresBackend):
            return {}
        why = backend.rewrite_table(TRACES_TABLE)
        if why is None:
            return {"pages": "rewritten"}
        return {"pages": "left", "why": why, "file_node": backend.file_node(TRACES_TABLE)}

    def pages_left(self, artifact: dict[str, Any]) -> bool:
        """Whether the pages a deletion's receipt ``artifact`` says it left (:meth:`clear_pages`)
        still hold the traces it took out: the table has not been rewritten since."""
        backend = self.registry.backend
        if artifact.get("pages") != "left" or not isinstance(backend, PostgresBackend):
            return False
        return backend.file_node(TRACES_TABLE) == artifact.get("file_node")

    @retry_conflicts
    def recent(self, limit: int = 20, *, tenant: str | None = None) -> list[dict[str, Any]]:
        """The newest ``limit`` traces, newest first (only ``tenant``'s when given)."""
        where, params = ("WHERE tenant = ?", [tenant]) if tenant is not None else ("", [])
        with self.connect() as con:
            cur = con.execute(
                f"SELECT * FROM query_traces {where} ORDER BY seq DESC LIMIT ?", [*params, limit]
            )
            cols = [d[0] for d in cur.description]
            rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
        for row in rows:
            row["groups"] = json.loads(row["groups"])
            row["trace"] = json.loads(row["trace"])
            row["recorded_at"] = row["recorded_at"].isoformat()
        return rows

    @retry_conflicts
    def count(self) -> int:
        with self.connect() as con:
            (n,) = con.execute("SELECT count(*) FROM query_traces").fetchone() or (0,)
        return int(n)
