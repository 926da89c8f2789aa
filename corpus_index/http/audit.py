"""Re-checks every hit the service returns, independently of the search's own prefilter.

The search already keeps rows a principal may not see out of its candidates (inside the
engine). This audit reads the returned rows again from the generation by ``chunk_ref`` with no
eligibility predicate, and judges each one in Python against the principal: a hit of another
tenant, without a shared ACL group, or of a collection no longer served is *unauthorized*. A hit
whose source has a tombstone is *deleted*; one whose source version is not the version the
last scan of its collection recorded is *superseded*. All three are expected to stay 0; the
service counts them in its metrics.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from corpus_index import predicates
from corpus_index.eligibility import Principal
from corpus_index.hits import Hit
from corpus_index.home import Home
from corpus_index.registry import Generation
from corpus_index.storage import Location

_COLUMNS = ["chunk_ref", "tenant_id", "acl_groups", "collection", "source_id"]


@dataclass(frozen=True, slots=True)
class AuditResult:
    """How many of the returned hits break each rule."""

    unauthorized: int = 0
    deleted: int = 0
    superseded: int = 0


class ResultAudit:
    """Judges returned hits; caches tombstones and scanned versions until their files change."""

    def __init__(self, corpus: Home) -> None:
        self.corpus = corpus
        self._lock = threading.Lock()
        self._tombstones: tuple[tuple[object, ...], frozenset[str]] | None = None
        self._versions: dict[str, tuple[tuple[tuple[int, ...], ...], dict[str, str]]] = {}

    def check(self, hits: Sequence[Hit], principal: Principal, gen: Generation) -> AuditResult:
        """Count the hits that break a rule (0, 0, 0 when all is well)."""
        if not hits:
            return AuditResult()
        refused = self._refused([h.provenance.chunk_ref for h in hits], principal, gen)
        unauthorized = sum(
            1 for h in hits if h.provenance.chunk_ref in refused or h.tenant_id != principal.tenant
        )
        gone = self._deleted()
        deleted = sum(1 for h in hits if h.source_id in gone)
        superseded = 0
        for hit in hits:
            current = self._scanned_versions(hit.collection).get(hit.source_id)
            if current is not None and current != hit.provenance.source_version:
                superseded += 1
        return AuditResult(unauthorized, deleted, superseded)

    def check_rows(
        self, shown: Sequence[tuple[str, str]], principal: Principal, gen: Generation
    ) -> AuditResult:
        """Count the rows a context answer showed, as ``(chunk_ref, source_id)`` (a group's
        own row and each member's), that break a rule: another tenant's, without a shared ACL
        group, of a collection no longer served, or of a deleted source. (Members carry no
        source version, so none is judged superseded.)"""
        if not shown:
            return AuditResult()
        refused = self._refused([ref for ref, _ in shown], principal, gen)
        gone = self._deleted()
        return AuditResult(
            unauthorized=sum(1 for ref, _ in shown if ref in refused),
            deleted=sum(1 for _, source in shown if source in gone),
        )

    def _refused(self, refs: Sequence[str], principal: Principal, gen: Generation) -> set[str]:
        """Those of ``refs`` whose row, read again with no eligibility predicate, the
        principal may not see (or that is not there)."""
        table = self.corpus.store.table(gen)
        wanted = sorted(set(refs))
        where = predicates.is_in("chunk_ref", wanted)
        rows = table.search().where(where).select(_COLUMNS).limit(len(wanted) * 2).to_list()
        by_ref = {r["chunk_ref"]: r for r in rows}
        served = {c.name for c in self.corpus.config.collections_in(gen.spec.namespace)}
        groups = set(principal.groups)
        return {
            ref
            for ref in wanted
            if (row := by_ref.get(ref)) is None
            or row["tenant_id"] != principal.tenant
            or not groups.intersection(row["acl_groups"] or ())
            or row["collection"] not in served
        }

    def _deleted(self) -> frozenset[str]:
        registry = self.corpus.registry
        state = registry.tombstones_state()
        with self._lock:
            if self._tombstones is None or self._tombstones[0] != state:
                ids = frozenset(t["source_id"] for t in registry.tombstones())
                self._tombstones = (state, ids)
            return self._tombstones[1]

    def _scanned_versions(self, collection: str) -> dict[str, str]:
        state = tuple(
            _stat(self.corpus.warehouse.path("source_manifest", key))
            for key in self.corpus.partitions_of(collection)
        )
        with self._lock:
            cached = self._versions.get(collection)
            if cached is not None and cached[0] == state:
                return cached[1]
        table = self.corpus.collection_table(
            "source_manifest", collection, columns=["source_id", "source_version", "change"]
        )
        versions: dict[str, str] = {}
        if table is not None:
            for row in table.to_pylist():
                if row["change"] != "removed":
                    versions[row["source_id"]] = row["source_version"]
        with self._lock:
            self._versions[collection] = (state, versions)
        return versions


def _stat(path: Location) -> tuple[int, ...]:
    st = path.file_stat()  # a partition is replaced whole, under a new time of last write
    return () if st is None else (st.st_size, st.st_mtime_ns)
