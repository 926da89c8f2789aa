"""The registry (``registry.duckdb``): generations, active pointers, check results, evals.

DuckDB allows one writing process per file, so every operation opens the file, does one short
transaction with bound parameters, and closes it; a lock held by another process is retried.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from corpus_index.errors import MissingGenerationError, PromotionRefusedError, RetryableError

STATUSES = ("BUILDING", "READY", "ACTIVE", "RETIRED", "FAILED")
SCHEMA_VERSION = 1

_DDL = [
    """CREATE TABLE IF NOT EXISTS generations (
        id VARCHAR PRIMARY KEY,
        namespace VARCHAR NOT NULL,
        profile VARCHAR NOT NULL,
        backend_spec VARCHAR NOT NULL,
        model_revision VARCHAR NOT NULL,
        dim INTEGER NOT NULL,
        normalized BOOLEAN NOT NULL,
        input_format VARCHAR NOT NULL,
        chunking VARCHAR NOT NULL,
        schema_version INTEGER NOT NULL,
        table_name VARCHAR NOT NULL,
        status VARCHAR NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL,
        ready_at TIMESTAMPTZ,
        activated_at TIMESTAMPTZ,
        retired_at TIMESTAMPTZ,
        row_count BIGINT NOT NULL DEFAULT 0,
        checks JSON NOT NULL DEFAULT '{}',
        eval JSON NOT NULL DEFAULT '{}',
        run_ids JSON NOT NULL DEFAULT '[]'
    )""",
    """CREATE TABLE IF NOT EXISTS active_pointers (
        namespace VARCHAR PRIMARY KEY,
        generation VARCHAR NOT NULL,
        previous VARCHAR,
        updated_at TIMESTAMPTZ NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS pointer_history (
        namespace VARCHAR NOT NULL,
        action VARCHAR NOT NULL,
        from_generation VARCHAR,
        to_generation VARCHAR NOT NULL,
        changed_at TIMESTAMPTZ NOT NULL,
        run_id VARCHAR
    )""",
]


@dataclass(frozen=True, slots=True)
class GenerationSpec:
    """The immutable part of a generation: what its vectors mean."""

    namespace: str
    profile: str
    backend_spec: str
    model_revision: str
    dim: int
    normalized: bool
    input_format: str
    chunking: str
    schema_version: int = SCHEMA_VERSION

    def same_vectors_as(self, other: GenerationSpec) -> bool:
        return (
            self.backend_spec == other.backend_spec
            and self.model_revision == other.model_revision
            and self.dim == other.dim
            and self.input_format == other.input_format
            and self.chunking == other.chunking
            and self.schema_version == other.schema_version
        )


@dataclass(frozen=True, slots=True)
class Generation:
    """One built index for one profile, with its lifecycle state."""

    id: str
    spec: GenerationSpec
    table_name: str
    status: str
    created_at: dt.datetime
    updated_at: dt.datetime
    ready_at: dt.datetime | None
    activated_at: dt.datetime | None
    retired_at: dt.datetime | None
    row_count: int
    checks: dict[str, Any] = field(default_factory=dict)
    eval: dict[str, Any] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "namespace": self.spec.namespace,
            "profile": self.spec.profile,
            "status": self.status,
            "backend_spec": self.spec.backend_spec,
            "model_revision": self.spec.model_revision,
            "dim": self.spec.dim,
            "normalized": self.spec.normalized,
            "input_format": self.spec.input_format,
            "chunking": self.spec.chunking,
            "schema_version": self.spec.schema_version,
            "table_name": self.table_name,
            "row_count": self.row_count,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "ready_at": self.ready_at.isoformat() if self.ready_at else None,
            "activated_at": self.activated_at.isoformat() if self.activated_at else None,
            "retired_at": self.retired_at.isoformat() if self.retired_at else None,
            "checks": self.checks,
            "eval": self.eval,
            "run_ids": self.run_ids,
        }


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Registry:
    """Short, serialized transactions over ``registry.duckdb``."""

    def __init__(self, path: Path, *, lock_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s
        self._initialized = False

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One connection for one short unit of work; retried while another process holds the lock."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.05
        while True:
            try:
                con = duckdb.connect(str(self.path))
                break
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise RetryableError(f"{self.path}: registry is busy: {exc}") from exc
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        try:
            if not self._initialized:
                for ddl in _DDL:
                    con.execute(ddl)
                self._initialized = True
            yield con
        finally:
            con.close()

    # -- generations -----------------------------------------------------------------------

    def _row_to_generation(self, row: tuple[Any, ...], cols: list[str]) -> Generation:
        r = dict(zip(cols, row, strict=True))
        spec = GenerationSpec(
            namespace=r["namespace"],
            profile=r["profile"],
            backend_spec=r["backend_spec"],
            model_revision=r["model_revision"],
            dim=int(r["dim"]),
            normalized=bool(r["normalized"]),
            input_format=r["input_format"],
            chunking=r["chunking"],
            schema_version=int(r["schema_version"]),
        )
        return Generation(
            id=r["id"],
            spec=spec,
            table_name=r["table_name"],
            status=r["status"],
            created_at=r["created_at"],
            updated_at=r["updated_at"],
            ready_at=r["ready_at"],
            activated_at=r["activated_at"],
            retired_at=r["retired_at"],
            row_count=int(r["row_count"]),
            checks=json.loads(r["checks"]) if r["checks"] else {},
            eval=json.loads(r["eval"]) if r["eval"] else {},
            run_ids=json.loads(r["run_ids"]) if r["run_ids"] else [],
        )

    def _select(self, where: str = "", params: list[Any] | None = None) -> list[Generation]:
        with self.connect() as con:
            cur = con.execute(f"SELECT * FROM generations {where} ORDER BY id", params or [])
            cols = [d[0] for d in cur.description]
            return [self._row_to_generation(row, cols) for row in cur.fetchall()]

    def generations(
        self, *, namespace: str | None = None, profile: str | None = None
    ) -> list[Generation]:
        clauses, params = [], []
        if namespace is not None:
            clauses.append("namespace = ?")
            params.append(namespace)
        if profile is not None:
            clauses.append("profile = ?")
            params.append(profile)
        where = ("WHERE " + " AND ".join(clauses)) if clauses else ""
        return self._select(where, params)

    def get(self, generation_id: str) -> Generation | None:
        found = self._select("WHERE id = ?", [generation_id])
        return found[0] if found else None

    def require(self, generation_id: str) -> Generation:
        gen = self.get(generation_id)
        if gen is None:
            raise MissingGenerationError(
                f"no generation {generation_id!r} (see `corpus generations`)"
            )
        return gen

    def open_generation(self, spec: GenerationSpec, *, run_id: str | None = None) -> Generation:
        """The live generation of ``spec.profile`` whose vectors match ``spec``, or a new BUILDING one.

        Live means BUILDING, READY or ACTIVE: all of them receive the same updates and deletions.
        """
        for gen in reversed(self.generations(profile=spec.profile)):
            if (
                gen.status in ("BUILDING", "READY", "ACTIVE")
                and gen.spec.same_vectors_as(spec)
                and gen.spec.namespace == spec.namespace
            ):
                if run_id:
                    self.add_run(gen.id, run_id)
                return gen
        now = _now()
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            (count,) = con.execute("SELECT count(*) FROM generations").fetchone() or (0,)
            gen_id = f"g{int(count) + 1:04d}"
            table_name = f"gen_{gen_id}"
            con.execute(
                """INSERT INTO generations (id, namespace, profile, backend_spec, model_revision, dim,
                   normalized, input_format, chunking, schema_version, table_name, status,
                   created_at, updated_at, run_ids)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'BUILDING', ?, ?, ?)""",
                [
                    gen_id,
                    spec.namespace,
                    spec.profile,
                    spec.backend_spec,
                    spec.model_revision,
                    spec.dim,
                    spec.normalized,
                    spec.input_format,
                    spec.chunking,
                    spec.schema_version,
                    table_name,
                    now,
                    now,
                    json.dumps([run_id] if run_id else []),
                ],
            )
            con.execute("COMMIT")
        return self.require(gen_id)

    def live_generation(self, profile: str) -> Generation | None:
        """The newest BUILDING/READY/ACTIVE generation of ``profile``, if any."""
        for gen in reversed(self.generations(profile=profile)):
            if gen.status in ("BUILDING", "READY", "ACTIVE"):
                return gen
        return None

    def add_run(self, generation_id: str, run_id: str) -> None:
        gen = self.require(generation_id)
        if run_id in gen.run_ids:
            return
        with self.connect() as con:
            con.execute(
                "UPDATE generations SET run_ids = ?, updated_at = ? WHERE id = ?",
                [json.dumps([*gen.run_ids, run_id]), _now(), generation_id],
            )

    def record_build(
        self, generation_id: str, *, row_count: int, checks: dict[str, Any], ready: bool
    ) -> Generation:
        """Store the generation's counts and check outcomes; BUILDING becomes READY when ``ready``."""
        gen = self.require(generation_id)
        status = gen.status
        now = _now()
        if gen.status == "BUILDING" and ready:
            status = "READY"
        with self.connect() as con:
            con.execute(
                """UPDATE generations SET row_count = ?, checks = ?, status = ?, updated_at = ?,
                   ready_at = COALESCE(ready_at, CASE WHEN ? = 'READY' THEN ?::TIMESTAMPTZ END)
                   WHERE id = ?""",
                [row_count, json.dumps(checks), status, now, status, now, generation_id],
            )
        return self.require(generation_id)

    def record_checks(self, generation_id: str, checks: dict[str, Any]) -> None:
        """Merge check outcomes (name -> {passed, ...}) into the generation's record."""
        gen = self.require(generation_id)
        merged = {**gen.checks, **checks}
        with self.connect() as con:
            con.execute(
                "UPDATE generations SET checks = ?, updated_at = ? WHERE id = ?",
                [json.dumps(merged), _now(), generation_id],
            )

    def record_eval(self, generation_id: str, metrics: dict[str, Any]) -> None:
        gen = self.require(generation_id)
        with self.connect() as con:
            con.execute(
                "UPDATE generations SET eval = ?, updated_at = ? WHERE id = ?",
                [json.dumps({**gen.eval, **metrics}), _now(), generation_id],
            )

    def set_status(self, generation_id: str, status: str) -> None:
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        now = _now()
        with self.connect() as con:
            con.execute(
                """UPDATE generations SET status = ?, updated_at = ?,
                   retired_at = CASE WHEN ? = 'RETIRED' THEN ?::TIMESTAMPTZ ELSE retired_at END
                   WHERE id = ?""",
                [status, now, status, now, generation_id],
            )

    # -- active pointers -------------------------------------------------------------------

    def active(self, namespace: str) -> Generation | None:
        with self.connect() as con:
            row = con.execute(
                "SELECT generation FROM active_pointers WHERE namespace = ?", [namespace]
            ).fetchone()
        return self.get(row[0]) if row else None

    def previous(self, namespace: str) -> Generation | None:
        with self.connect() as con:
            row = con.execute(
                "SELECT previous FROM active_pointers WHERE namespace = ?", [namespace]
            ).fetchone()
        return self.get(row[0]) if row and row[0] else None

    def promote(
        self, generation_id: str, *, run_id: str | None = None, action: str = "promote"
    ) -> Generation:
        """Move the namespace's ACTIVE pointer to ``generation_id`` in one transaction.

        Raises:
            PromotionRefusedError: the generation is not READY/ACTIVE, or a gate failed or never ran.
        """
        gen = self.require(generation_id)
        if gen.status not in ("READY", "ACTIVE"):
            raise PromotionRefusedError(
                f"generation {gen.id} is {gen.status}; only a READY generation can be promoted"
            )
        failed = sorted(name for name, c in gen.checks.items() if not c.get("passed"))
        if failed:
            raise PromotionRefusedError(
                f"generation {gen.id} cannot be promoted: failed checks: {', '.join(failed)}"
            )
        ns = gen.spec.namespace
        now = _now()
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            row = con.execute(
                "SELECT generation FROM active_pointers WHERE namespace = ?", [ns]
            ).fetchone()
            current = row[0] if row else None
            if current == gen.id:
                con.execute("COMMIT")
                return gen
            if current is not None:
                con.execute(
                    "UPDATE generations SET status = 'READY', updated_at = ? WHERE id = ?",
                    [now, current],
                )
            con.execute(
                "UPDATE generations SET status = 'ACTIVE', activated_at = ?, updated_at = ? WHERE id = ?",
                [now, now, gen.id],
            )
            con.execute(
                """INSERT INTO active_pointers (namespace, generation, previous, updated_at)
                   VALUES (?, ?, ?, ?)
                   ON CONFLICT (namespace) DO UPDATE SET generation = excluded.generation,
                   previous = excluded.previous, updated_at = excluded.updated_at""",
                [ns, gen.id, current, now],
            )
            con.execute(
                "INSERT INTO pointer_history VALUES (?, ?, ?, ?, ?, ?)",
                [ns, action, current, gen.id, now, run_id],
            )
            con.execute("COMMIT")
        return self.require(gen.id)

    def history(self, namespace: str) -> list[dict[str, Any]]:
        with self.connect() as con:
            cur = con.execute(
                "SELECT * FROM pointer_history WHERE namespace = ? ORDER BY changed_at", [namespace]
            )
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
