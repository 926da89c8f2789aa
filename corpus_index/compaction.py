"""Compaction: LanceDB ``optimize`` on every live table, old versions past the retention window
removed, and embedding-cache entries no live source uses purged.

``optimize`` also brings the FTS and ANN indexes up to date, so rows added since they were built
become indexed. Deletion overrides retention: while a tombstone is pending physical purge, old
versions are removed whatever their age, so the deleted content leaves the disk.
"""

from __future__ import annotations

import datetime as dt
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index import lance, predicates
from corpus_index.deletion import live_input_hashes
from corpus_index.home import Home

DEFAULT_RETENTION_HOURS = 24.0
DELETE_CHUNK = 500


@dataclass(slots=True)
class CompactionReport:
    retention_hours: float
    forced_by_tombstones: int
    tables: list[dict[str, Any]] = field(default_factory=list)
    cache_entries_purged: int = 0
    tombstones_purged: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "retention_hours": self.retention_hours,
            "forced_by_tombstones": self.forced_by_tombstones,
            "tables": self.tables,
            "cache_entries_purged": self.cache_entries_purged,
            "tombstones_purged": self.tombstones_purged,
            "seconds": round(self.seconds, 3),
        }


def _purge_cache(table: Any, live: set[str]) -> int:
    rows = int(table.count_rows())
    if rows == 0:
        return 0
    hashes = table.search().select(["input_hash"]).limit(rows + 1).to_arrow()["input_hash"]
    dead = pc.filter(hashes, pc.invert(pc.is_in(hashes, pa.array(sorted(live), pa.string()))))
    dead_list = dead.to_pylist()
    for start in range(0, len(dead_list), DELETE_CHUNK):
        table.delete(predicates.is_in("input_hash", dead_list[start : start + DELETE_CHUNK]))
    return len(dead_list)


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
    live_tables = [g.table_name for g in corpus.registry.generations() if g.status != "RETIRED"]
    targets = [n for n in live_tables if n in names] + sorted(
        n for n in names if n.startswith("cache__")
    )
    for name in targets:
        table = db.open_table(name)
        entry: dict[str, Any] = {"table": name, "versions_before": len(table.list_versions())}
        if name.startswith("cache__"):
            purged = _purge_cache(table, live)
            entry["cache_entries_purged"] = purged
            report.cache_entries_purged += purged
        with warnings.catch_warnings():
            # window 0 (a deletion awaits purge) removes every old version on purpose; a query
            # still reading one of them in another process fails once and is retried
            warnings.filterwarnings("ignore", message=r".*removes every version except")
            table.optimize(cleanup_older_than=window)
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
    ids = [t["source_id"] for t in pending]
    corpus.registry.mark_purged(ids)
    report.tombstones_purged = ids
    report.seconds = time.perf_counter() - t0
    return report
