"""``corpus doctor``: find the damaged files of a home, and rebuild what can be rebuilt.

What is checked: every warehouse partition reads whole with its asset's expected columns;
every live generation's LanceDB table opens and every row its manifest lists reads (a count
other than the registry's is no damage: the next ``index_generation`` records it); the registry
opens, and holds the ACTIVE pointers and tombstones its
journal recorded; every embedding-cache table reads.

What repair does: a damaged warehouse partition is removed with the other partitions of its
collection, so the next sync rebuilds them from the sources (vectors come from the cache); a
damaged generation table is dropped, so the next sync rebuilds it from the warehouse; a damaged
cache table is dropped (the next sync embeds its inputs again); a damaged or lost registry is
moved aside and a new one restored from the journal (``corpus_index.journal``); a registry in
PostgreSQL (``CORPUS_REGISTRY``) that lacks what the journal recorded (an empty database, say)
has the journal replayed into it. What cannot be
rebuilt: the sources themselves, and what only the lost registry held (check outcomes and
evals of generations never promoted, traces, stale-source notes), which the next sync records
again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from corpus_index import lance
from corpus_index.cache import unclaimed_tables
from corpus_index.config import Settings
from corpus_index.errors import ConfigError, DamagedStateError, StoreUnreachableError
from corpus_index.group_records import GROUP_SCHEMA, MEMBER_SCHEMA
from corpus_index.home import Home
from corpus_index.homelock import home_lock_of
from corpus_index.identities import IDENTITY_SCHEMA
from corpus_index.identity_resume import PASS_COLUMNS_LATER, PASS_SCHEMA
from corpus_index.identity_sightings import SIGHTING_SCHEMA
from corpus_index.identity_store import (
    IDENTITIES,
    MENTIONS,
    PASS,
    SIGHTINGS,
    STORED_MENTION_SCHEMA,
)
from corpus_index.index_store import GenerationStore
from corpus_index.linked.memo import MEMO_READ
from corpus_index.linked.relink import LINK_COLUMNS_FIRST
from corpus_index.records import (
    BLOCK_SCHEMA,
    INPUT_SCHEMA,
    MANIFEST_SCHEMA,
    QUARANTINE_SCHEMA,
    REFUSAL_SCHEMA,
    embedding_schema,
)
from corpus_index.refusals import REFUSALS
from corpus_index.registry import (
    LIVE,
    Generation,
    journaled_pointers,
    open_registry,
    restore_from_journal,
)
from corpus_index.reprocess_queue import QUEUE_SCHEMA
from corpus_index.sidecars import SIDECAR_PINS_SCHEMA
from corpus_index.storage import Location
from corpus_index.unit_prints import MESSAGE_COLUMNS, PRINTS, PRINTS_SCHEMA
from corpus_index.warehouse import Warehouse

# the columns each warehouse asset's partitions must have (others are only read whole)
EXPECTED_COLUMNS: dict[str, set[str]] = {
    "source_manifest": set(MANIFEST_SCHEMA.names),
    "parsed_blocks": set(BLOCK_SCHEMA.names),
    "quarantine": set(QUARANTINE_SCHEMA.names),
    "embedding_inputs": set(INPUT_SCHEMA.names),
    "embeddings": set(embedding_schema(1).names),
    REFUSALS: set(REFUSAL_SCHEMA.names),
    "sidecar_pins": set(SIDECAR_PINS_SCHEMA.names),
    "linked_groups": set(GROUP_SCHEMA.names),
    "group_members": set(MEMBER_SCHEMA.names),
    "reprocess_queue": set(QUEUE_SCHEMA.names),
    IDENTITIES: set(IDENTITY_SCHEMA.names),
    MENTIONS: set(STORED_MENTION_SCHEMA.names),
    SIGHTINGS: set(SIGHTING_SCHEMA.names),
    # each unit's place and header values came later: a state without them is not read (the
    # next pass is full, and writes them)
    PASS: set(PASS_SCHEMA.names) - set(PASS_COLUMNS_LATER),
    "conversation_links": set(LINK_COLUMNS_FIRST),  # ``unit_id`` and ``timestamp`` came later
    "group_memo": set(MEMO_READ),  # ``units`` came later: a memo without them reads as all
    # the message columns came later: a table without them is not read (the next run hashes
    # and decodes every unit, and writes it anew)
    PRINTS: set(PRINTS_SCHEMA.names) - set(MESSAGE_COLUMNS),
}


@dataclass(frozen=True, slots=True)
class Finding:
    """One damaged thing: what it is, its file, the problem, and what repair does about it."""

    # "registry", "journal", "warehouse", "generation", "unmaintained" or "cache"; of a
    # notice (see ``notices``), "unclaimed"
    kind: str
    name: str  # the partition, generation id or table name
    path: str
    problem: str
    repair: str

    def to_json(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "name": self.name,
            "path": self.path,
            "problem": self.problem,
            "repair": self.repair,
        }


def check(settings: Settings) -> list[Finding]:
    """Every damage found in the home of ``settings`` (an empty list: the home is healthy)."""
    findings = _check_registry(settings)
    findings += _check_warehouse(Warehouse(settings.warehouse))
    store = GenerationStore(settings.lance_uri)
    registry_ok = not any(f.kind == "registry" for f in findings)
    if registry_ok:
        unmaintained = _unmaintained(settings)
        for gen in open_registry(settings).generations():
            if gen.status in LIVE:
                problem = generation_problem(store, gen)
                if problem is None:
                    continue
                path = f"{settings.lance_uri}/{gen.table_name}.lance"
                why = unmaintained(gen)
                if why is None:
                    remedy = "drop the table; the next `corpus sync` rebuilds it from the warehouse"
                    findings.append(Finding("generation", gen.id, path, problem, remedy))
                else:  # dropping it would lose it for good: no sync writes it any more
                    remedy = f"none: {why}, so no sync rebuilds it; `corpus retire {gen.id}`"
                    findings.append(Finding("unmaintained", gen.id, path, problem, remedy))
    for name in sorted(n for n in lance.table_names(store.db) if n.startswith("cache__")):
        problem = _table_problem(store, name, "input_hash")
        if problem:
            findings.append(
                Finding(
                    "cache",
                    name,
                    f"{settings.lance_uri}/{name}.lance",
                    problem,
                    "drop the cache table; the next `corpus sync` embeds its inputs again",
                )
            )
    return findings


def notices(settings: Settings) -> list[Finding]:
    """What is no damage but wants a decision: each embedding-cache table named before cache
    names were exact whose owner cannot be decided, so no model reads it (none where the
    registry cannot be read: its own damage is named by ``check``).

    Repair leaves these alone: only whoever knows which model wrote such a table can tell
    whether its vectors are still wanted.
    """
    try:
        claimants = {
            (g.spec.backend_spec, g.spec.model_revision)
            for g in open_registry(settings).generations()
        }
    except DamagedStateError:
        return []
    return [
        Finding(
            "unclaimed",
            u.table,
            f"{settings.lance_uri}/{u.table}.lance",
            f"no model reads it: it was named before cache names were exact, and {u.why}",
            "nothing reads it (each model embeds into a table of its exact name, "
            f"cache__<model>__<revision>__<digest>): delete {settings.lance_uri}/{u.table}.lance "
            "to free its space once no model needs its vectors",
        )
        for u in unclaimed_tables(settings.lance_uri, claimants)
    ]


def _unmaintained(settings: Settings) -> Callable[[Generation], str | None]:
    """``Home.unmaintained`` of the home's configuration; nothing is unmaintained where the
    configuration cannot be read (its own problem is named where it is loaded)."""
    try:
        return Home(settings).unmaintained
    except ConfigError:
        return lambda gen: None


def generation_problem(store: GenerationStore, gen: Generation) -> str | None:
    """Why a live generation's table cannot serve (missing, or rows its manifest lists that
    cannot be read), or None. A row count other than the registry's is no damage: the
    registry's is written by ``index_generation`` after ``index_rows`` changed the table, and
    a run that has not got there yet (the daemon's automation still to reach it) leaves it
    behind; dropping a table that reads whole would only take the namespace out of search."""
    if not store.exists(gen):
        if gen.row_count == 0 and gen.status == "BUILDING":
            return None  # nothing written yet
        return f"its table {gen.table_name} is missing ({gen.row_count} rows recorded)"
    return _table_problem(store, gen.table_name, "vector_id")


def _table_problem(store: GenerationStore, name: str, column: str) -> str | None:
    """Why table ``name`` cannot be read whole (one column of every row), or None.

    Raises:
        StoreUnreachableError: its object store failed or refused a request (throttled, a
            server error, the credentials): what the table holds is unknown, and a table
            that may be whole is never named damaged (repair would drop it).
    """
    try:
        with lance.damage(store.uri):
            table = store.db.open_table(name)
            read = table.search().select([column]).limit(None).to_arrow().num_rows
            counted = int(table.count_rows())
    except DamagedStateError as exc:
        return exc.reason
    except StoreUnreachableError:
        raise
    except (RuntimeError, OSError, ValueError) as exc:  # unreadable in a way not named above
        return str(exc).splitlines()[0]
    if read != counted:
        return f"{read} rows read of the {counted} its manifest lists"
    return None


def _check_registry(settings: Settings) -> list[Finding]:
    registry = open_registry(settings)
    path = registry.location
    # a PostgreSQL registry is never missing as a file: an empty database whose journal
    # recorded pointers and tombstones is found below, and restored the same way
    lost_file = registry.path is not None and not registry.path.exists()
    if lost_file and any(registry.journal.entries()):
        return [
            Finding(
                "registry",
                "registry.duckdb",
                path,
                "the registry is missing",
                "restore generations, ACTIVE pointers and tombstones from the journal",
            )
        ]
    try:
        gens = {g.id: g for g in registry.generations()}
        stones = {t["source_id"] for t in registry.tombstones()}
        namespaces = {g.spec.namespace for g in gens.values()}
        active = {ns: registry.active(ns) for ns in namespaces}
    except DamagedStateError as exc:
        return [
            Finding(
                "registry",
                "registry.duckdb",
                path,
                exc.reason,
                "move it aside and restore generations, ACTIVE pointers and tombstones "
                "from the journal",
            )
        ]
    lost: list[str] = []
    pointers: dict[str, str] = {}
    journaled: set[str] = set()
    for ns, moved in journaled_pointers(registry.journal.entries()).items():
        pointers[ns] = moved["generation"]
    for entry in registry.journal.entries():
        if entry["op"] == "tombstone":
            journaled.add(entry["source_id"])
        elif entry["op"] == "lift":
            journaled -= set(entry["source_ids"])
    for ns, gen_id in sorted(pointers.items()):
        now = active.get(ns)
        if now is None or now.id != gen_id:
            lost.append(f"namespace {ns} should serve {gen_id}")
    missing = sorted(journaled - stones)
    if missing:
        lost.append(f"{len(missing)} tombstones are missing ({', '.join(missing[:3])})")
    if not lost:
        return []
    return [
        Finding(
            "journal",
            "registry.journal.jsonl",
            str(registry.journal.path),
            "the registry lacks what its journal recorded: " + "; ".join(lost),
            "restore the ACTIVE pointers and tombstones from the journal",
        )
    ]


def _check_warehouse(warehouse: Warehouse) -> list[Finding]:
    findings: list[Finding] = []
    for path in warehouse.root.rglob("*.parquet"):
        if not path.is_file():
            continue
        relative = path.relative_to(warehouse.root)
        problem = _partition_problem(path, EXPECTED_COLUMNS.get(relative.parts[0], set()))
        if problem:
            findings.append(
                Finding(
                    "warehouse",
                    str(relative.with_suffix("")),
                    str(path),
                    problem,
                    f"remove the partitions of collection {path.stem}; the next `corpus sync` "
                    "rebuilds them from the sources and the cache",
                )
            )
    return findings


def _partition_problem(path: Location, expected: set[str]) -> str | None:
    """Why the partition at ``path`` cannot be read whole with ``expected`` columns, or None.

    Raises:
        StoreUnreachableError: its object store failed or refused a request (no damage:
            repair would remove partitions that may be whole).
    """
    try:
        with path.store_failures(), pq.ParquetFile(path.path, filesystem=path.fs) as pf:
            names = set(pf.schema_arrow.names)
            for _ in pf.iter_batches():
                pass
    except (pa.ArrowException, OSError) as exc:
        return str(exc).splitlines()[0]
    missing = sorted(expected - names)
    if missing:
        return f"it lacks the columns {', '.join(missing)}"
    return None


def repair(settings: Settings, findings: list[Finding]) -> list[str]:
    """Rebuild what ``findings`` name (see the module doc); returns what was done, one line each.

    Generation tables and partitions are rebuilt by the next sync, not here. It holds the
    home's lock, so it never removes what a sync or a run in flight is writing.

    Raises:
        HomeBusyError: a sync, a promotion or a run holds the home.
    """
    with home_lock_of(settings, "doctor --repair"):
        return _repair(settings, findings)


def _repair(settings: Settings, findings: list[Finding]) -> list[str]:
    done: list[str] = []
    registry = open_registry(settings)
    for f in findings:
        if f.kind == "registry" and settings.registry_path.exists():
            stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
            aside = settings.registry_path.with_name(f"registry.duckdb.damaged-{stamp}")
            settings.registry_path.rename(aside)
            wal = settings.registry_path.with_name("registry.duckdb.wal")
            if wal.exists():
                wal.rename(aside.with_name(aside.name + ".wal"))
            done.append(f"moved the damaged registry aside to {aside}")
    if any(f.kind in ("registry", "journal") for f in findings):
        counts = restore_from_journal(open_registry(settings))
        done.append(
            f"restored {counts['generations']} generations, {counts['pointers']} ACTIVE "
            f"pointers and {counts['tombstones']} tombstones from {registry.journal.path}"
        )
        done += [f"skipped {registry.journal.path} {line}" for line in registry.journal.skipped()]
    warehouse = Warehouse(settings.warehouse)
    for f in findings:
        if f.kind == "warehouse" and Path(f.path).stem == "data":  # an unpartitioned asset
            Location.of(f.path).unlink(missing_ok=True)
            done.append(f"removed {f.path}")
    for collection in sorted(
        {Path(f.path).stem for f in findings if f.kind == "warehouse"} - {"data"}
    ):
        removed = warehouse.delete_collection(collection)
        done.append(f"removed {len(removed)} warehouse partitions of {collection}")
    store = GenerationStore(settings.lance_uri)
    for f in findings:
        table = Path(f.path).stem  # <home>/lance/<table>.lance
        if f.kind in ("generation", "cache") and table in lance.table_names(store.db):
            store.db.drop_table(table)
            done.append(f"dropped the damaged table {table}")
    return done
