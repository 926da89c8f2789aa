"""The registry (``registry.duckdb``): generations, active pointers, check results, evals.

DuckDB allows one writing process per file, so every operation opens the file, does one short
transaction with bound parameters, and closes it; a lock held by another process is retried.
Pointer moves, new generations and tombstones are also journaled (``corpus_index.journal``)
right after they commit, so ``restore_from_journal`` can rebuild them into a new registry.
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

from corpus_index.errors import (
    DamagedRegistryError,
    MissingGenerationError,
    PromotionRefusedError,
    RetireRefusedError,
    RetryableError,
)
from corpus_index.journal import Journal

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
    """CREATE TABLE IF NOT EXISTS tombstones (
        source_id VARCHAR PRIMARY KEY,
        collection VARCHAR NOT NULL,
        namespace VARCHAR NOT NULL,
        content_hashes JSON NOT NULL DEFAULT '[]',
        input_hashes JSON NOT NULL DEFAULT '[]',
        removed_at TIMESTAMPTZ NOT NULL,
        reason VARCHAR NOT NULL,
        receipt VARCHAR,
        purged_at TIMESTAMPTZ
    )""",
    """CREATE TABLE IF NOT EXISTS stale_sources (
        source_id VARCHAR PRIMARY KEY,
        collection VARCHAR NOT NULL,
        serving_version VARCHAR NOT NULL,
        broken_version VARCHAR NOT NULL,
        path VARCHAR,
        line BIGINT,
        error VARCHAR NOT NULL,
        since TIMESTAMPTZ NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS dataset_evals (
        dataset VARCHAR NOT NULL,
        mode VARCHAR NOT NULL,
        generation VARCHAR NOT NULL,
        profile VARCHAR NOT NULL,
        backend_spec VARCHAR NOT NULL,
        metrics JSON NOT NULL,
        evaluated_at TIMESTAMPTZ NOT NULL
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
        self.journal = Journal(self.path.with_name("registry.journal.jsonl"))
        # namespace -> (the registry files' state when read, the ACTIVE generation or None)
        self._active_cache: dict[str, tuple[tuple[int, ...], Generation | None]] = {}

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
            except duckdb.Error as exc:
                if "lock" not in str(exc).lower():
                    raise DamagedRegistryError(
                        "the registry", self.path, str(exc).splitlines()[0]
                    ) from None
                if time.monotonic() > deadline:
                    raise RetryableError(f"{self.path}: registry is busy: {exc}") from exc
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        try:
            if not self._initialized:
                for ddl in _DDL:
                    con.execute(ddl)
                self._initialized = True
            yield con
        except (duckdb.InternalException, duckdb.SerializationException) as exc:
            # a file that opens but whose blocks are garbage fails on first read
            raise DamagedRegistryError(
                "the registry", self.path, str(exc).splitlines()[0]
            ) from None
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
            return self._select_on(con, where, params)

    def _select_on(
        self, con: duckdb.DuckDBPyConnection, where: str = "", params: list[Any] | None = None
    ) -> list[Generation]:
        cur = con.execute(f"SELECT * FROM generations {where} ORDER BY id", params or [])
        cols = [d[0] for d in cur.description]
        return [self._row_to_generation(row, cols) for row in cur.fetchall()]

    def _require_on(self, con: duckdb.DuckDBPyConnection, generation_id: str) -> Generation:
        """``require`` on an open connection: a read-modify-write opens the database once (each
        open costs tens of milliseconds) and reads what it changes under the same lock."""
        found = self._select_on(con, "WHERE id = ?", [generation_id])
        if not found:
            raise MissingGenerationError(
                f"no generation {generation_id!r} (see `corpus generations`)"
            )
        return found[0]

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
        with self.connect() as con:
            return self._require_on(con, generation_id)

    def open_generation(self, spec: GenerationSpec, *, run_id: str | None = None) -> Generation:
        """The live generation of ``spec.profile`` whose vectors match ``spec``, or a new BUILDING one.

        Live means BUILDING, READY or ACTIVE: all of them receive the same updates and deletions.
        """
        with self.connect() as con:
            for gen in reversed(self._select_on(con, "WHERE profile = ?", [spec.profile])):
                if (
                    gen.status in ("BUILDING", "READY", "ACTIVE")
                    and gen.spec.same_vectors_as(spec)
                    and gen.spec.namespace == spec.namespace
                ):
                    if run_id:
                        self._add_run_on(con, gen, run_id)
                    return gen
            now = _now()
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
            self._journal_generation(con, gen_id)
            return self._require_on(con, gen_id)

    def _journal_generation(self, con: duckdb.DuckDBPyConnection, generation_id: str) -> None:
        cur = con.execute("SELECT * FROM generations WHERE id = ?", [generation_id])
        cols = [d[0] for d in cur.description]
        row = cur.fetchone()
        if row is not None:
            self.journal.append("generation", row=dict(zip(cols, row, strict=True)))

    def live_generation(self, profile: str) -> Generation | None:
        """The newest BUILDING/READY/ACTIVE generation of ``profile``, if any."""
        for gen in reversed(self.generations(profile=profile)):
            if gen.status in ("BUILDING", "READY", "ACTIVE"):
                return gen
        return None

    def add_run(self, generation_id: str, run_id: str) -> None:
        with self.connect() as con:
            self._add_run_on(con, self._require_on(con, generation_id), run_id)

    def _add_run_on(self, con: duckdb.DuckDBPyConnection, gen: Generation, run_id: str) -> None:
        if run_id in gen.run_ids:
            return
        con.execute(
            "UPDATE generations SET run_ids = ?, updated_at = ? WHERE id = ?",
            [json.dumps([*gen.run_ids, run_id]), _now(), gen.id],
        )

    def record_build(
        self, generation_id: str, *, row_count: int, checks: dict[str, Any], ready: bool
    ) -> Generation:
        """Store the generation's row count and merge check outcomes; BUILDING becomes READY
        when ``ready``."""
        with self.connect() as con:
            gen = self._require_on(con, generation_id)
            status = gen.status
            now = _now()
            if gen.status == "BUILDING" and ready:
                status = "READY"
            merged = {**gen.checks, **checks}
            con.execute(
                """UPDATE generations SET row_count = ?, checks = ?, status = ?, updated_at = ?,
                   ready_at = COALESCE(ready_at, CASE WHEN ? = 'READY' THEN ?::TIMESTAMPTZ END)
                   WHERE id = ?""",
                [row_count, json.dumps(merged), status, now, status, now, generation_id],
            )
            return self._require_on(con, generation_id)

    def record_checks(
        self, generation_id: str, checks: dict[str, Any], *, keep: set[str] | None = None
    ) -> None:
        """Merge check outcomes (name -> {passed, ...}) into the generation's record.

        With ``keep``, outcomes of checks outside ``keep`` (say, of a collection no longer
        configured) are dropped.
        """
        with self.connect() as con:
            gen = self._require_on(con, generation_id)
            merged = {**gen.checks, **checks}
            if keep is not None:
                merged = {k: v for k, v in merged.items() if k in keep}
            con.execute(
                "UPDATE generations SET checks = ?, updated_at = ? WHERE id = ?",
                [json.dumps(merged), _now(), generation_id],
            )

    def record_eval(self, generation_id: str, metrics: dict[str, Any]) -> None:
        with self.connect() as con:
            gen = self._require_on(con, generation_id)
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

    def active(self, namespace: str, *, cached: bool = False) -> Generation | None:
        """The namespace's ACTIVE generation, read in one query on one connection.

        With ``cached``, the answer is reused while ``registry.duckdb`` and its WAL are unchanged
        on disk (size and mtime): every commit, by this process or another, appends to the WAL
        or checkpoints into the file, so a promotion or rollback elsewhere is seen by the next
        call. The query path uses it; it saves opening the database on every search.
        """
        if cached:
            state = self._files_state()
            hit = self._active_cache.get(namespace)
            if hit is not None and hit[0] == state:
                return hit[1]
        else:
            state = None
        with self.connect() as con:
            cur = con.execute(
                "SELECT g.* FROM active_pointers p JOIN generations g ON g.id = p.generation "
                "WHERE p.namespace = ?",
                [namespace],
            )
            cols = [d[0] for d in cur.description]
            row = cur.fetchone()
        gen = self._row_to_generation(row, cols) if row else None
        if cached and state is not None:
            # the state read before the query: a commit racing it changes the files again,
            # so the next call re-reads rather than trusting an answer older than the files
            self._active_cache[namespace] = (state, gen)
        return gen

    def _files_state(self) -> tuple[int, ...]:
        state: list[int] = []
        for path in (self.path, self.path.with_name(self.path.name + ".wal")):
            try:
                st = path.stat()
            except FileNotFoundError:
                state += [-1, -1, -1]
            else:
                state += [st.st_size, st.st_mtime_ns, st.st_ino]
        return tuple(state)

    def previous(self, namespace: str) -> Generation | None:
        with self.connect() as con:
            row = con.execute(
                "SELECT previous FROM active_pointers WHERE namespace = ?", [namespace]
            ).fetchone()
        return self.get(row[0]) if row and row[0] else None

    def promote(
        self,
        generation_id: str,
        *,
        run_id: str | None = None,
        action: str = "promote",
        required: set[str] | None = None,
    ) -> Generation:
        """Move the namespace's ACTIVE pointer to ``generation_id`` in one transaction.

        ``required`` names the checks that must have run and passed; without it, every
        recorded check must have passed.

        Raises:
            PromotionRefusedError: the generation is not READY/ACTIVE, or a gate failed or never ran.
        """
        gen = self.require(generation_id)
        if gen.status not in ("READY", "ACTIVE"):
            raise PromotionRefusedError(
                f"generation {gen.id} is {gen.status}; only a READY generation can be promoted"
                + _gate_summary(gen, required)
            )
        summary = _gate_summary(gen, required)
        if summary:
            raise PromotionRefusedError(f"generation {gen.id} cannot be promoted{summary}")
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
            for journaled in (current, gen.id):
                if journaled is not None:
                    self._journal_generation(con, journaled)
            self.journal.append(
                "pointer", namespace=ns, generation=gen.id, previous=current, action=action, at=now
            )
            return self._require_on(con, gen.id)

    def deactivated_at(self, generation_id: str) -> dt.datetime | None:
        """When ``generation_id`` last stopped being ACTIVE, if it ever served."""
        with self.connect() as con:
            row = con.execute(
                "SELECT max(changed_at) FROM pointer_history WHERE from_generation = ?",
                [generation_id],
            ).fetchone()
        return row[0] if row and row[0] else None

    def retire(
        self, generation_id: str, *, window_hours: float, now: dt.datetime | None = None
    ) -> Generation:
        """Mark a generation RETIRED, after the safety window, never the ACTIVE one nor the
        rollback target. Retiring a RETIRED generation again is a no-op (so a crash between
        this and dropping its table can be finished by retiring again).

        Raises:
            RetireRefusedError: ACTIVE, the rollback target, or inside the safety window.
        """
        gen = self.require(generation_id)
        if gen.status == "RETIRED":
            return gen
        now = now or _now()
        served = self.deactivated_at(gen.id)
        reference = served or gen.ready_at or gen.created_at
        age_h = (now - reference).total_seconds() / 3600
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            row = con.execute(
                "SELECT generation, previous FROM active_pointers WHERE namespace = ?",
                [gen.spec.namespace],
            ).fetchone()
            active, previous = (row[0], row[1]) if row else (None, None)
            refusal = ""
            if gen.id == active:
                refusal = f"generation {gen.id} is ACTIVE in namespace {gen.spec.namespace!r}"
            elif gen.id == previous:
                refusal = (
                    f"generation {gen.id} is the rollback target of namespace "
                    f"{gen.spec.namespace!r} (`corpus rollback` would return to it)"
                )
            elif age_h < window_hours:
                refusal = (
                    f"generation {gen.id} is inside its safety window: {age_h:.2f} h since "
                    f"{'it last served' if served else 'it was built'}, "
                    f"the window is {window_hours:g} h (namespaces.{gen.spec.namespace}."
                    "retire_after_hours)"
                )
            if refusal:
                con.execute("ROLLBACK")
                raise RetireRefusedError(f"cannot retire: {refusal}")
            con.execute(
                """UPDATE generations SET status = 'RETIRED', retired_at = ?, updated_at = ?
                   WHERE id = ?""",
                [now, now, gen.id],
            )
            con.execute("COMMIT")
            return self._require_on(con, gen.id)

    # -- evaluations on BEIR-format datasets (corpus eval) ----------------------------------

    def record_dataset_evals(self, results: list[dict[str, Any]]) -> None:
        now = _now()
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            for r in results:
                con.execute(
                    "INSERT INTO dataset_evals VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        r["dataset"],
                        r["mode"],
                        r["generation"],
                        r["profile"],
                        r["backend_spec"],
                        json.dumps(r),
                        now,
                    ],
                )
            con.execute("COMMIT")

    def dataset_evals(self, dataset: str | None = None) -> list[dict[str, Any]]:
        """Every recorded run, oldest first (each the JSON ``corpus eval --json`` printed)."""
        where, params = ("WHERE dataset = ?", [dataset]) if dataset else ("", [])
        with self.connect() as con:
            rows = con.execute(
                f"SELECT metrics FROM dataset_evals {where} ORDER BY evaluated_at", params
            ).fetchall()
        return [json.loads(r[0]) for r in rows]

    # -- tombstones --------------------------------------------------------------------------

    def add_tombstones(self, rows: list[dict[str, Any]]) -> None:
        """Record removed sources (source_id, collection, namespace, content_hashes,
        input_hashes, reason, receipt); a source removed again gets a fresh tombstone."""
        if not rows:
            return
        now = _now()
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            for r in rows:
                con.execute(
                    """INSERT INTO tombstones (source_id, collection, namespace, content_hashes,
                       input_hashes, removed_at, reason, receipt, purged_at)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL)
                       ON CONFLICT (source_id) DO UPDATE SET collection = excluded.collection,
                       namespace = excluded.namespace, content_hashes = excluded.content_hashes,
                       input_hashes = excluded.input_hashes, removed_at = excluded.removed_at,
                       reason = excluded.reason, receipt = excluded.receipt, purged_at = NULL""",
                    [
                        r["source_id"],
                        r["collection"],
                        r["namespace"],
                        json.dumps(sorted(r.get("content_hashes", []))),
                        json.dumps(sorted(r.get("input_hashes", []))),
                        now,
                        r.get("reason", "removed"),
                        r.get("receipt"),
                    ],
                )
            con.execute("COMMIT")
        self.journal.extend(
            [
                {
                    "op": "tombstone",
                    "source_id": r["source_id"],
                    "collection": r["collection"],
                    "namespace": r["namespace"],
                    "content_hashes": sorted(r.get("content_hashes", [])),
                    "input_hashes": sorted(r.get("input_hashes", [])),
                    "removed_at": now,
                    "reason": r.get("reason", "removed"),
                    "receipt": r.get("receipt"),
                }
                for r in rows
            ]
        )

    def tombstones(
        self, *, namespace: str | None = None, pending_purge: bool = False
    ) -> list[dict[str, Any]]:
        clauses, params = [], []
        if namespace is not None:
            clauses.append("namespace = ?")
            params.append(namespace)
        if pending_purge:
            clauses.append("purged_at IS NULL")
        where = ("WHERE " + " AND ".join(clauses)) if clauses else ""
        with self.connect() as con:
            cur = con.execute(f"SELECT * FROM tombstones {where} ORDER BY source_id", params)
            cols = [d[0] for d in cur.description]
            out = []
            for row in cur.fetchall():
                r = dict(zip(cols, row, strict=True))
                r["content_hashes"] = json.loads(r["content_hashes"])
                r["input_hashes"] = json.loads(r["input_hashes"])
                out.append(r)
            return out

    def tombstoned(self, collection: str, reason: str) -> set[str]:
        """The source_ids of ``collection`` tombstoned for ``reason``."""
        with self.connect() as con:
            rows = con.execute(
                "SELECT source_id FROM tombstones WHERE collection = ? AND reason = ?",
                [collection, reason],
            ).fetchall()
        return {r[0] for r in rows}

    def tombstone(self, source_id: str) -> dict[str, Any] | None:
        found = [t for t in self.tombstones() if t["source_id"] == source_id]
        return found[0] if found else None

    # -- stale sources: a document that stopped parsing, still serving its last good version --

    def set_stale(self, collection: str, rows: list[dict[str, Any]]) -> None:
        """Make the collection's stale sources exactly ``rows`` (source_id, serving_version,
        broken_version, path, line, error); one still broken at the same version keeps its
        ``since``, a fixed or removed one is cleared."""
        now = _now()
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            kept = {
                (sid, ver): since
                for sid, ver, since in con.execute(
                    "SELECT source_id, broken_version, since FROM stale_sources "
                    "WHERE collection = ?",
                    [collection],
                ).fetchall()
            }
            con.execute("DELETE FROM stale_sources WHERE collection = ?", [collection])
            for r in rows:
                con.execute(
                    "INSERT INTO stale_sources VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        r["source_id"],
                        collection,
                        r["serving_version"],
                        r["broken_version"],
                        r.get("path"),
                        r.get("line"),
                        r["error"],
                        kept.get((r["source_id"], r["broken_version"]), now),
                    ],
                )
            con.execute("COMMIT")

    def clear_stale(self, source_ids: list[str]) -> None:
        """Deleted sources are no longer stale: they no longer serve at all."""
        if source_ids:
            with self.connect() as con:
                con.execute(
                    "DELETE FROM stale_sources WHERE list_contains(?, source_id)", [source_ids]
                )

    def stale_sources(self, collection: str | None = None) -> list[dict[str, Any]]:
        where, params = ("WHERE collection = ?", [collection]) if collection else ("", [])
        with self.connect() as con:
            cur = con.execute(f"SELECT * FROM stale_sources {where} ORDER BY source_id", params)
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def lift_tombstones(self, source_ids: list[str]) -> int:
        """A source that came back is live again: its tombstone no longer applies."""
        if not source_ids:
            return 0
        with self.connect() as con:
            lifted = sorted(
                r[0]
                for r in con.execute(
                    "SELECT source_id FROM tombstones WHERE list_contains(?, source_id)",
                    [source_ids],
                ).fetchall()
            )
            con.execute("DELETE FROM tombstones WHERE list_contains(?, source_id)", [source_ids])
        if lifted:
            self.journal.append("lift", source_ids=lifted)
        return len(lifted)

    def mark_purged(self, source_ids: list[str]) -> None:
        if not source_ids:
            return
        now = _now()
        with self.connect() as con:
            con.execute(
                "UPDATE tombstones SET purged_at = ? WHERE list_contains(?, source_id)",
                [now, source_ids],
            )
        self.journal.append("purged", source_ids=sorted(source_ids), at=now)

    def history(self, namespace: str) -> list[dict[str, Any]]:
        with self.connect() as con:
            cur = con.execute(
                "SELECT * FROM pointer_history WHERE namespace = ? ORDER BY changed_at", [namespace]
            )
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def _gate_summary(gen: Generation, required: set[str] | None) -> str:
    """'': every required gate ran and passed; else ': failed checks: ...; checks not run: ...'."""
    names = set(gen.checks) if required is None else required
    # a check recorded as not run (``ran: false``) is missing, not failed
    ran = {n for n in names if n in gen.checks and gen.checks[n].get("ran") is not False}
    failed = sorted(n for n in ran if not gen.checks[n].get("passed"))
    missing = sorted(names - ran)
    parts = []
    if failed:
        parts.append(f"failed checks: {', '.join(failed)}")
    if missing:
        parts.append(f"checks not run: {', '.join(missing)}")
    return (": " + "; ".join(parts)) if parts else ""


def restore_from_journal(registry: Registry) -> dict[str, int]:
    """Replay the journal into ``registry`` (a new, empty one after the old was lost): the
    generations it recorded, each namespace's ACTIVE pointer and every tombstone. Returns how
    many of each were restored.

    Generations are restored as last journaled, except that only the generation a pointer
    names is ACTIVE (one ACTIVE before a later promotion is READY).
    """
    gens: dict[str, dict[str, Any]] = {}
    pointers: dict[str, dict[str, Any]] = {}
    stones: dict[str, dict[str, Any]] = {}
    for entry in registry.journal.entries():
        op = entry.pop("op")
        if op == "generation":
            gens[entry["row"]["id"]] = entry["row"]
        elif op == "pointer":
            pointers[entry["namespace"]] = entry
        elif op == "tombstone":
            stones[entry["source_id"]] = {**entry, "purged_at": None}
        elif op == "lift":
            for sid in entry["source_ids"]:
                stones.pop(sid, None)
        elif op == "purged":
            for sid in entry["source_ids"]:
                if sid in stones:
                    stones[sid]["purged_at"] = entry["at"]
    active = {p["generation"] for p in pointers.values()}
    with registry.connect() as con:
        con.execute("BEGIN TRANSACTION")
        cols = [d[0] for d in con.execute("SELECT * FROM generations LIMIT 0").description]
        for gen_id, row in sorted(gens.items()):
            row = {c: row.get(c) for c in cols}
            if row["status"] == "ACTIVE" and gen_id not in active:
                row["status"] = "READY"
            for c in ("checks", "eval", "run_ids"):
                if not isinstance(row[c], str):
                    row[c] = json.dumps(row[c] if row[c] is not None else {})
            con.execute(
                f"INSERT OR REPLACE INTO generations ({', '.join(cols)}) "
                f"VALUES ({', '.join('?' for _ in cols)})",
                [row[c] for c in cols],
            )
        for ns, p in sorted(pointers.items()):
            con.execute(
                "INSERT OR REPLACE INTO active_pointers VALUES (?, ?, ?, ?)",
                [ns, p["generation"], p["previous"], p["at"]],
            )
            con.execute("UPDATE generations SET status = 'ACTIVE' WHERE id = ?", [p["generation"]])
        for sid, t in sorted(stones.items()):
            con.execute(
                """INSERT OR REPLACE INTO tombstones (source_id, collection, namespace,
                   content_hashes, input_hashes, removed_at, reason, receipt, purged_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                [
                    sid,
                    t["collection"],
                    t["namespace"],
                    json.dumps(t["content_hashes"]),
                    json.dumps(t["input_hashes"]),
                    t["removed_at"],
                    t["reason"],
                    t["receipt"],
                    t["purged_at"],
                ],
            )
        con.execute("COMMIT")
    return {"generations": len(gens), "pointers": len(pointers), "tombstones": len(stones)}
