"""The registry: generations, active pointers, check results, evals, tombstones.

It lives in ``<home>/registry.duckdb`` by default, or in a PostgreSQL database when
``CORPUS_REGISTRY`` names one (``open_registry``); ``corpus_index.registry_sql`` keeps what
differs between the two. Every operation is one short unit of work with bound parameters: on
DuckDB, which allows one writing process per file, it opens the file and closes it (a lock held
by another process is retried); on PostgreSQL it is one SERIALIZABLE transaction, run again
when it lost a race with another process's. Pointer moves, new generations and tombstones are
also journaled (``corpus_index.journal``, ``<home>/registry.journal.jsonl`` for both) right
after they commit, so ``restore_from_journal`` can rebuild them into a new registry.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corpus_index.config import Settings
from corpus_index.errors import (
    MissingGenerationError,
    PromotionRefusedError,
    RetireRefusedError,
    RetryableError,
)
from corpus_index.journal import Journal
from corpus_index.registry_sql import (
    Connection,
    DuckDBBackend,
    in_list,
    is_database_url,
    open_backend,
    retry_conflicts,
    upsert,
)

STATUSES = ("BUILDING", "READY", "ACTIVE", "RETIRED", "FAILED")
# the statuses whose generation its profile's runs write (the newest of them matching its spec)
LIVE = ("BUILDING", "READY", "ACTIVE")
SCHEMA_VERSION = 1
# how long a cached read waits for a registry another process holds before it keeps what it
# read last (Registry.get)
CACHED_READ_WAIT_S = 0.5

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
    """CREATE TABLE IF NOT EXISTS home_keys (
        name VARCHAR PRIMARY KEY,
        secret VARCHAR NOT NULL,
        created_at TIMESTAMPTZ NOT NULL
    )""",
]


POINTER_COLUMNS = ("namespace", "generation", "previous", "updated_at")
TOMBSTONE_COLUMNS = (
    "source_id",
    "collection",
    "namespace",
    "content_hashes",
    "input_hashes",
    "removed_at",
    "reason",
    "receipt",
    "purged_at",
)


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


JOURNAL_NAME = "registry.journal.jsonl"


def open_registry(settings: Settings, *, lock_timeout_s: float = 30.0) -> Registry:
    """The registry ``settings`` name: the PostgreSQL database of ``settings.registry_url``
    when set, else ``<home>/registry.duckdb``; journaled to ``<home>/registry.journal.jsonl``."""
    return Registry(
        settings.registry_url or settings.registry_path,
        journal=settings.home / JOURNAL_NAME,
        lock_timeout_s=lock_timeout_s,
    )


class Registry:
    """Short transactions over the registry's database (a DuckDB file or PostgreSQL).

    Args:
        location: a ``postgresql://user@host:port/db`` URL, or the path of a DuckDB file.
        journal: the journal file; default ``registry.journal.jsonl`` beside a DuckDB file
            (a PostgreSQL registry must be given one).
        lock_timeout_s: how long a busy or conflicting operation is retried.
    """

    def __init__(
        self,
        location: Path | str,
        *,
        journal: Path | None = None,
        lock_timeout_s: float = 30.0,
    ) -> None:
        self.lock_timeout_s = lock_timeout_s
        self.backend = open_backend(location, ddl=_DDL, lock_timeout_s=lock_timeout_s)
        # the DuckDB file (None on PostgreSQL)
        self.path = self.backend.path if isinstance(self.backend, DuckDBBackend) else None
        if journal is None:
            if self.path is None:
                raise ValueError(
                    "a PostgreSQL registry needs a journal path "
                    f"(open_registry gives <home>/{JOURNAL_NAME})"
                )
            journal = self.path.with_name(JOURNAL_NAME)
        self.journal = Journal(journal)
        # namespace -> (the backend's state when read, the ACTIVE generation or None)
        self._active_cache: dict[str, tuple[tuple[object, ...], Generation | None]] = {}
        # generation id -> (the backend's state when read, its record)
        self._generation_cache: dict[str, tuple[tuple[object, ...], Generation]] = {}

    @property
    def location(self) -> str:
        """Where the registry lives, for messages (a URL without its password, or a path)."""
        return self.backend.location

    @property
    def on_postgres(self) -> bool:
        return is_database_url(self.backend.location)

    @contextmanager
    def connect(self, extra_ddl: Sequence[str] = ()) -> Iterator[Connection]:
        """One short unit of work (on PostgreSQL one transaction, committed at the end).

        Args:
            extra_ddl: tables beside the registry's (the query traces), created on first use.
        """
        with self.backend.connect(extra_ddl) as con:
            yield con

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
        self, con: Connection, where: str = "", params: list[Any] | None = None
    ) -> list[Generation]:
        cur = con.execute(f"SELECT * FROM generations {where} ORDER BY id", params or [])
        cols = [d[0] for d in cur.description]
        return [self._row_to_generation(row, cols) for row in cur.fetchall()]

    def _require_on(self, con: Connection, generation_id: str) -> Generation:
        """``require`` on an open connection: a read-modify-write opens the database once (each
        open costs tens of milliseconds) and reads what it changes under the same lock."""
        found = self._select_on(con, "WHERE id = ?", [generation_id])
        if not found:
            raise MissingGenerationError(
                f"no generation {generation_id!r} (see `corpus generations`)"
            )
        return found[0]

    @retry_conflicts
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

    @retry_conflicts
    def get(self, generation_id: str, *, cached: bool = False) -> Generation | None:
        """The generation's record (None when there is none). With ``cached``, the record read
        last is reused while the backend's state for it is unchanged (as :meth:`active` does):
        a status changed elsewhere (retired, failed) is seen by the next call, and on DuckDB
        the record is read without opening the database, so a search naming a generation goes
        on while another process holds the registry; one that holds it past
        :data:`CACHED_READ_WAIT_S` (a sync's write) leaves the record read last in use.
        """
        if not cached:
            found = self._select("WHERE id = ?", [generation_id])
            return found[0] if found else None
        hit = self._generation_cache.get(generation_id)
        try:
            state = self.backend.generation_state(generation_id)
            if hit is not None and hit[0] == state:
                return hit[1]
            with self.backend.connect(wait_s=CACHED_READ_WAIT_S) as con:
                found = self._select_on(con, "WHERE id = ?", [generation_id])
        except RetryableError:
            if hit is None:
                raise
            return hit[1]  # the last good record: the registry is busy
        gen = found[0] if found else None
        if gen is not None:
            self._generation_cache[generation_id] = (state, gen)
        return gen

    @retry_conflicts
    def require(self, generation_id: str) -> Generation:
        with self.connect() as con:
            return self._require_on(con, generation_id)

    @retry_conflicts
    def open_generation(self, spec: GenerationSpec, *, run_id: str | None = None) -> Generation:
        """The live generation of ``spec.profile`` whose vectors match ``spec``, or a new BUILDING one.

        Live means BUILDING, READY or ACTIVE: all of them receive the same updates and deletions.
        """
        with self.connect() as con:
            for gen in reversed(self._select_on(con, "WHERE profile = ?", [spec.profile])):
                if (
                    gen.status in LIVE
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

    def _journal_generation(self, con: Connection, generation_id: str) -> None:
        cur = con.execute("SELECT * FROM generations WHERE id = ?", [generation_id])
        cols = [d[0] for d in cur.description]
        row = cur.fetchone()
        if row is not None:
            self.journal.append("generation", row=dict(zip(cols, row, strict=True)))

    @retry_conflicts
    def live_generation(self, profile: str) -> Generation | None:
        """The newest BUILDING/READY/ACTIVE generation of ``profile``, if any."""
        for gen in reversed(self.generations(profile=profile)):
            if gen.status in LIVE:
                return gen
        return None

    @retry_conflicts
    def add_run(self, generation_id: str, run_id: str) -> None:
        with self.connect() as con:
            self._add_run_on(con, self._require_on(con, generation_id), run_id)

    def _add_run_on(self, con: Connection, gen: Generation, run_id: str) -> None:
        if run_id in gen.run_ids:
            return
        con.execute(
            "UPDATE generations SET run_ids = ?, updated_at = ? WHERE id = ?",
            [json.dumps([*gen.run_ids, run_id]), _now(), gen.id],
        )

    @retry_conflicts
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

    @retry_conflicts
    def record_rows(self, generation_id: str, row_count: int) -> None:
        """Store the generation's row count after rows were taken out of it (a deletion
        reaches every generation, built by its profile's runs or not)."""
        with self.connect() as con:
            con.execute(
                "UPDATE generations SET row_count = ?, updated_at = ? WHERE id = ?",
                [row_count, _now(), generation_id],
            )
            self._journal_generation(con, generation_id)

    @retry_conflicts
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

    @retry_conflicts
    def record_eval(self, generation_id: str, metrics: dict[str, Any]) -> None:
        with self.connect() as con:
            gen = self._require_on(con, generation_id)
            con.execute(
                "UPDATE generations SET eval = ?, updated_at = ? WHERE id = ?",
                [json.dumps({**gen.eval, **metrics}), _now(), generation_id],
            )

    @retry_conflicts
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

    @retry_conflicts
    def active(self, namespace: str, *, cached: bool = False) -> Generation | None:
        """The namespace's ACTIVE generation, read in one query on one connection.

        With ``cached``, the answer is reused while the backend's state is unchanged: on DuckDB
        ``registry.duckdb`` and its WAL on disk (size and mtime; every commit, by this process
        or another, appends to the WAL or checkpoints into the file), on PostgreSQL the pointer
        row's and the generation's ``updated_at``. A promotion or rollback elsewhere is seen by
        the next call. The query path uses it; on DuckDB it saves opening the database on every
        search.
        """
        if cached:
            state = self.backend.active_state(namespace)
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

    @retry_conflicts
    def tombstones_state(self) -> tuple[object, ...]:
        """A key that changes whenever the set of tombstoned sources changes (on DuckDB, with
        every commit), for callers that cache ``tombstones()``."""
        return self.backend.tombstones_state()

    @retry_conflicts
    def previous(self, namespace: str) -> Generation | None:
        with self.connect() as con:
            row = con.execute(
                "SELECT previous FROM active_pointers WHERE namespace = ?", [namespace]
            ).fetchone()
        return self.get(row[0]) if row and row[0] else None

    @retry_conflicts
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
        now = _now()
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            # its status and checks read in the transaction that moves the pointer: a check
            # recorded failed by another process meanwhile refuses it (or, on PostgreSQL,
            # makes one of the two transactions run again)
            gen = self._require_on(con, generation_id)
            if gen.status not in ("READY", "ACTIVE"):
                raise PromotionRefusedError(
                    f"generation {gen.id} is {gen.status}; only a READY generation can be "
                    "promoted" + _gate_summary(gen, required)
                )
            summary = _gate_summary(gen, required)
            if summary:
                raise PromotionRefusedError(f"generation {gen.id} cannot be promoted{summary}")
            ns = gen.spec.namespace
            row = con.execute(
                "SELECT generation FROM active_pointers WHERE namespace = ?", [ns]
            ).fetchone()
            current = row[0] if row else None
            if current == gen.id:
                con.execute("COMMIT")
                return gen
            # history is read in changed_at order: a clock read before this transaction saw the
            # last move (another process's, on PostgreSQL) must still come after it
            (last,) = con.execute(
                "SELECT max(changed_at) FROM pointer_history WHERE namespace = ?", [ns]
            ).fetchone()
            if last is not None and last >= now:
                now = last + dt.timedelta(microseconds=1)
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

    @retry_conflicts
    def deactivated_at(self, generation_id: str) -> dt.datetime | None:
        """When ``generation_id`` last stopped being ACTIVE, if it ever served."""
        with self.connect() as con:
            row = con.execute(
                "SELECT max(changed_at) FROM pointer_history WHERE from_generation = ?",
                [generation_id],
            ).fetchone()
        return row[0] if row and row[0] else None

    @retry_conflicts
    def retire(
        self,
        generation_id: str,
        *,
        window_hours: float,
        now: dt.datetime | None = None,
        rollback_possible: bool = True,
    ) -> Generation:
        """Mark a generation RETIRED, after the safety window, never the ACTIVE one nor the
        rollback target while a rollback to it is possible. Retiring a RETIRED generation
        again is a no-op (so a crash between this and dropping its table can be finished by
        retiring again).

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
            elif gen.id == previous and rollback_possible:
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
            # journaled as every other change of a generation: a registry restored from the
            # journal would otherwise bring it back READY, promotable, its table dropped
            self._journal_generation(con, gen.id)
            return self._require_on(con, gen.id)

    # -- evaluations on BEIR-format datasets (corpus eval) ----------------------------------

    @retry_conflicts
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

    @retry_conflicts
    def dataset_evals(self, dataset: str | None = None) -> list[dict[str, Any]]:
        """Every recorded run, oldest first (each the JSON ``corpus eval --json`` printed)."""
        where, params = ("WHERE dataset = ?", [dataset]) if dataset else ("", [])
        with self.connect() as con:
            rows = con.execute(
                f"SELECT metrics FROM dataset_evals {where} ORDER BY evaluated_at", params
            ).fetchall()
        return [json.loads(r[0]) for r in rows]

    # -- tombstones --------------------------------------------------------------------------

    @retry_conflicts
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

    @retry_conflicts
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

    @retry_conflicts
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

    @retry_conflicts
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

    @retry_conflicts
    def clear_stale(self, source_ids: list[str]) -> None:
        """Deleted sources are no longer stale: they no longer serve at all."""
        if source_ids:
            with self.connect() as con:
                con.execute(
                    f"DELETE FROM stale_sources WHERE source_id IN {in_list(source_ids)}",
                    source_ids,
                )

    @retry_conflicts
    def stale_sources(self, collection: str | None = None) -> list[dict[str, Any]]:
        where, params = ("WHERE collection = ?", [collection]) if collection else ("", [])
        with self.connect() as con:
            cur = con.execute(f"SELECT * FROM stale_sources {where} ORDER BY source_id", params)
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    @retry_conflicts
    def lift_tombstones(self, source_ids: list[str]) -> int:
        """A source that came back is live again: its tombstone no longer applies."""
        if not source_ids:
            return 0
        with self.connect() as con:
            lifted = sorted(
                r[0]
                for r in con.execute(
                    f"SELECT source_id FROM tombstones WHERE source_id IN {in_list(source_ids)}",
                    source_ids,
                ).fetchall()
            )
            con.execute(
                f"DELETE FROM tombstones WHERE source_id IN {in_list(source_ids)}", source_ids
            )
        if lifted:
            self.journal.append("lift", source_ids=lifted)
        return len(lifted)

    @retry_conflicts
    def mark_purged(self, source_ids: list[str]) -> None:
        if not source_ids:
            return
        now = _now()
        with self.connect() as con:
            con.execute(
                f"UPDATE tombstones SET purged_at = ? WHERE source_id IN {in_list(source_ids)}",
                [now, *source_ids],
            )
        self.journal.append("purged", source_ids=sorted(source_ids), at=now)

    @retry_conflicts
    def home_key(self, name: str) -> bytes:
        """The home's secret ``name`` (32 random bytes), made on first use and kept here, in
        the registry every machine of the home reads, never in a file that travels with what
        it keys (a deletion receipt keys with it the hashes of the addresses and numbers it
        took out, which a bare hash would let anyone holding the receipt guess). Not in the
        journal: a registry rebuilt from it makes a new one, and the hashes keyed with the old
        one can no longer be matched."""
        with self.connect() as con:
            found = con.execute("SELECT secret FROM home_keys WHERE name = ?", [name]).fetchone()
            if found is None:
                con.execute(
                    "INSERT INTO home_keys VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING",
                    [name, secrets.token_hex(32), _now()],
                )
                found = con.execute(
                    "SELECT secret FROM home_keys WHERE name = ?", [name]
                ).fetchone()
        return bytes.fromhex(str(found[0]))

    @retry_conflicts
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


def _instant(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value)


def journaled_pointers(entries: Iterator[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each namespace's last pointer move in the journal (namespace -> its entry).

    The last by time, not by line: on PostgreSQL two processes may append their lines in the
    other order than they committed, and promotion times follow commit order (``promote``).
    """
    pointers: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if entry["op"] != "pointer":
            continue
        known = pointers.get(entry["namespace"])
        if known is None or _instant(entry["at"]) >= _instant(known["at"]):
            pointers[entry["namespace"]] = entry
    return pointers


def restore_from_journal(registry: Registry) -> dict[str, int]:
    """Replay the journal into ``registry`` (a new, empty one after the old was lost): the
    generations it recorded, each namespace's ACTIVE pointer and every tombstone. Returns how
    many of each were restored.

    Generations are restored as last updated, except that only the generation a pointer
    names is ACTIVE (one ACTIVE before a later promotion is READY).
    """
    gens: dict[str, dict[str, Any]] = {}
    pointers = journaled_pointers(registry.journal.entries())
    stones: dict[str, dict[str, Any]] = {}
    for entry in registry.journal.entries():
        op = entry.pop("op")
        if op == "generation":
            row = entry["row"]
            known = gens.get(row["id"])
            if known is None or _instant(row["updated_at"]) >= _instant(known["updated_at"]):
                gens[row["id"]] = row
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
            con.execute(upsert("generations", cols, "id"), [row[c] for c in cols])
        for ns, p in sorted(pointers.items()):
            con.execute(
                upsert("active_pointers", POINTER_COLUMNS, "namespace"),
                [ns, p["generation"], p["previous"], p["at"]],
            )
            con.execute("UPDATE generations SET status = 'ACTIVE' WHERE id = ?", [p["generation"]])
        for sid, t in sorted(stones.items()):
            con.execute(
                upsert("tombstones", TOMBSTONE_COLUMNS, "source_id"),
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
