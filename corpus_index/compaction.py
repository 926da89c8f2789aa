"""Compaction: LanceDB ``optimize`` on every live table, old versions past the retention window
removed, embedding-cache entries no live source uses purged, and the table of a RETIRED
generation that a retire cut short left behind dropped.

``optimize`` also brings the FTS and ANN indexes up to date, so rows added since they were built
become indexed. Deletion overrides retention: while a tombstone is pending physical purge, every
fragment that held a deleted row (the receipt names them; for a cache table, the fragments of
the entries purged now) is rewritten first (``purge.rewrite_fragments``), old versions are
removed whatever their age, as are the data files no version names (left by a commit that was
lost, which LanceDB keeps 7 days otherwise) and orphaned ``*.tmp`` files (left by a crashed
atomic write), so the deleted content leaves the disk. None is a step's work in flight: a compaction
holds the home's lock alone, even where runs share it (``compaction_job`` is tagged
``homelock.EXCLUSIVE_TAGS``). The ``doc_id``, full-text and ANN indexes of a
generation table that held deleted rows are built again (``index_store.rebuild_after_deletion``):
``optimize`` keeps deleted rows' ids, words and PQ codes in them.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index import index_store, lance, predicates, purge
from corpus_index.config import Settings
from corpus_index.deletion import live_input_hashes
from corpus_index.home import Home
from corpus_index.storage import Location
from corpus_index.store_copy import receipt_location

DEFAULT_RETENTION_HOURS = 24.0
DELETE_CHUNK = 500


@dataclass(slots=True)
class CompactionReport:
    retention_hours: float
    forced_by_tombstones: int
    tables: list[dict[str, Any]] = field(default_factory=list)
    cache_entries_purged: int = 0
    tombstones_purged: list[str] = field(default_factory=list)
    temp_files_removed: list[str] = field(default_factory=list)
    retired_tables_dropped: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "retention_hours": self.retention_hours,
            "forced_by_tombstones": self.forced_by_tombstones,
            "tables": self.tables,
            "cache_entries_purged": self.cache_entries_purged,
            "tombstones_purged": self.tombstones_purged,
            "temp_files_removed": self.temp_files_removed,
            "retired_tables_dropped": self.retired_tables_dropped,
            "seconds": round(self.seconds, 3),
        }


def _purge_cache(table: Any, live: set[str]) -> tuple[int, purge.Rewrite]:
    """Delete the entries no live input uses, then rewrite the fragments that held them."""
    rows = int(table.count_rows())
    if rows == 0:
        return 0, purge.Rewrite(0, 0)
    got = table.search().select(["input_hash", "_rowaddr"]).limit(rows + 1).to_arrow()
    dead = pc.invert(pc.is_in(got["input_hash"], pa.array(sorted(live), pa.string())))
    dead_rows = got.filter(dead)
    dead_list = dead_rows["input_hash"].to_pylist()
    for start in range(0, len(dead_list), DELETE_CHUNK):
        where = predicates.is_in("input_hash", dead_list[start : start + DELETE_CHUNK])
        lance.retry_commits(functools.partial(table.delete, where), table=table)
    held = purge.fragments_of(dead_rows["_rowaddr"]) if dead_list else set()
    return len(dead_list), purge.rewrite_fragments(table, held) if held else purge.Rewrite(0, 0)


def _held_fragments(
    settings: Settings, pending: list[dict[str, Any]]
) -> dict[str, set[int] | None]:
    """Per table, the fragments the pending deletions' receipts say held deleted rows; a table
    maps to None (rewrite every fragment) when a receipt cannot say (missing, or written before
    receipts named fragments)."""
    held: dict[str, set[int] | None] = {}
    unknown = False
    for tomb in pending:
        try:
            where = receipt_location(settings, tomb["receipt"])
            receipt = json.loads(where.read_text(encoding="utf-8"))
        except (OSError, ValueError, TypeError):
            unknown = True
            continue
        if "fragments_to_rewrite" not in receipt:
            unknown = True
            continue
        for table, fragments in receipt["fragments_to_rewrite"].items():
            known = held.setdefault(table, set())
            if known is not None:
                known.update(int(f) for f in fragments)
    if unknown:
        return {"*": None}
    return held


def remove_temp_files(root: Path | Location, older_than: dt.timedelta) -> list[str]:
    """Remove ``*.tmp`` files under ``root`` (a home folder, not Dagster's own folder in it, or
    the object-store prefix of the stores) older than ``older_than``: what a crashed atomic
    write left behind. Returns their paths."""
    removed: list[str] = []
    root = Location.of(root)
    cutoff = time.time() - older_than.total_seconds()
    dagster = root / "dagster"
    for path in root.rglob("*.tmp"):
        if not path.is_file() or path.is_relative_to(dagster):
            continue
        try:
            if path.mtime() <= cutoff:
                path.unlink()
                removed.append(str(path))
        except FileNotFoundError:
            continue  # renamed into place meanwhile
    return removed


def compact(corpus: Home, *, retention_hours: float | None = None) -> CompactionReport:
    """Optimize every live generation table and every cache table; purge unused cache entries."""
    t0 = time.perf_counter()
    retention = DEFAULT_RETENTION_HOURS if retention_hours is None else retention_hours
    pending = corpus.registry.tombstones(pending_purge=True)
    report = CompactionReport(retention_hours=retention, forced_by_tombstones=len(pending))
    window = dt.timedelta(0) if pending else dt.timedelta(hours=retention)
    live = live_input_hashes(corpus)
    db = lance.connect(corpus.settings.lance_uri)
    names = set(lance.table_names(db))
    generations = corpus.registry.generations()
    for gen in generations:
        # what a retire cut short left (its registry half done, its table not dropped): no
        # query reads the table, and its old versions may hold a deleted source's rows
        if gen.status == "RETIRED" and gen.table_name in names and corpus.store.drop(gen):
            report.retired_tables_dropped.append(gen.table_name)
            names.discard(gen.table_name)
    live_tables = [g.table_name for g in generations if g.status != "RETIRED"]
    targets = [n for n in live_tables if n in names] + sorted(
        n for n in names if n.startswith("cache__")
    )
    held = _held_fragments(corpus.settings, pending)
    lance_root = Location.of(corpus.settings.lance_uri)
    for name in targets:
        table = db.open_table(name)
        entry: dict[str, Any] = {"table": name, "versions_before": len(table.list_versions())}
        if name.startswith("cache__"):
            purged, rewrite = _purge_cache(table, live)
            entry["cache_entries_purged"] = purged
            report.cache_entries_purged += purged
        elif pending:
            # a deletion awaits purge: every fragment holding masked rows is rewritten, those
            # the receipts name and any other (an edit's merge masks the rows it replaced, so
            # an earlier version of a deleted source may lie in a fragment no receipt names)
            masked = purge.fragments_with_deletions(lance_root / f"{name}.lance")
            fragments = None if "*" in held else (held.get(name) or set()) | masked
            rewrite = purge.rewrite_fragments(table, fragments)
            if rewrite.fragments or name in held or "*" in held:
                # the doc_id, full-text and ANN indexes keep deleted rows' ids, words and PQ
                # codes through optimize: built again from the live rows, their old files join
                # the old versions removed below
                entry["indexes_rebuilt"] = index_store.rebuild_after_deletion(table)
        else:
            rewrite = purge.Rewrite(0, 0)
        entry["fragments_rewritten"] = rewrite.fragments
        entry["rows_rewritten"] = rewrite.rows
        with warnings.catch_warnings():
            # window 0 (a deletion awaits purge) removes every old version on purpose; a query
            # still reading one of them in another process fails once and is retried
            warnings.filterwarnings("ignore", message=r".*removes every version except")
            lance.retry_commits(
                functools.partial(
                    table.optimize,
                    cleanup_older_than=window,
                    # and the data files no version names (a commit that was lost, to a
                    # conflict or a crash, left them, perhaps holding the deleted rows), which
                    # LanceDB keeps 7 days as another writer's work in flight: no writer is
                    # in flight, as the compaction holds the home alone
                    delete_unverified=bool(pending),
                ),
                table=table,
            )
        entry["versions_after"] = len(table.list_versions())
        entry["rows"] = int(table.count_rows())
        report.tables.append(entry)
    for gen in corpus.registry.generations():
        if gen.status != "RETIRED" and corpus.store.exists(gen):
            cov = corpus.store.coverage(gen)
            for entry in report.tables:
                if entry["table"] == gen.table_name:
                    entry["fts_unindexed"] = cov.fts_unindexed
                    entry["ann_unindexed"] = cov.ann_unindexed
    report.temp_files_removed = [
        path for root in corpus.settings.roots for path in remove_temp_files(root, window)
    ]
    ids = [t["source_id"] for t in pending]
    corpus.registry.mark_purged(ids)
    report.tombstones_purged = ids
    report.seconds = time.perf_counter() - t0
    return report
