"""Generation tables in LanceDB: one table per generation, one row per vector entry (DESIGN §6)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index import kinds, lance, predicates
from corpus_index.errors import DamagedTableError, StoreUnreachableError
from corpus_index.registry import Generation
from corpus_index.storage import OBJECT_STORE_SCHEMES, store_reason

ANN_INDEX = "vector_idx"  # the name LanceDB gives the index on "vector"
ANN_MIN_ROWS = 5000  # below this, exact search is fast and an IVF index cannot train well
ANN_MAX_PARTITIONS = 1024
# k-means rounds that train the IVF partitions (LanceDB's default is 50). The partitions only
# route a query to the cells it probes, and a tenth of them are probed with an exact re-rank
# of 20x the candidates (``retrieval``), so rounds past the first few buy no recall: recall@10
# was the same with 10 rounds as with 50 on MiniLM vectors (SciFact), the hash embedder's
# (69,238 rows) and clustered synthetic vectors (200,000 rows), and the build took 0.4x the
# time (bench/README.md, "ANN build").
ANN_KMEANS_ITERATIONS = 10
FTS_COLUMN = "text"
FTS_INDEX = f"{FTS_COLUMN}_idx"
# columns with a scalar (BTREE) index: a group's members are read by ``doc_id IN (...)``, and
# group rows by their ids, which without one scans every row of the table
SCALAR_INDEX_COLUMNS = ("doc_id",)
# A generation's indexes may leave a bounded tail of newest rows uncovered: LanceDB searches rows
# no index covers yet exactly, beside the indexed ones, so a sync that adds a few rows to a large
# table need not bring its indexes up to date (``optimize`` costs time in proportion to the
# table, not to the change). The tail is brought in once it passes TAIL_MIN_ROWS or
# TAIL_SHARE of the table, or once the table holds more than TAIL_MAX_SMALL_FRAGMENTS small
# fragments (every sync adds at least one); a table under TAIL_ALWAYS_BELOW rows is always
# brought fully up to date, which costs little there.
TAIL_MIN_ROWS = 2_000
TAIL_SHARE = 0.01
TAIL_MAX_SMALL_FRAGMENTS = 16
TAIL_ALWAYS_BELOW = 20_000
# rows whose refs :meth:`GenerationStore.refs_outside` reads and tests at once (each test builds
# a hash set of the sources it tests against; the rows held at once stay bounded)
REFS_BATCH = 65_536

# what a generation's refs are read as (:meth:`GenerationStore.collection_refs`), here none
_NO_REFS = pa.schema([("chunk_ref", pa.string()), ("source_id", pa.string())]).empty_table()

# the schema metadata key of the id a generation table was made with (``created``)
CREATED_KEY = b"corpus_index.table_created"

# the filter columns every generation table carries: the union the collection kinds promote
PROMOTED_COLUMNS = kinds.PROMOTED_COLUMNS

# a row's last day: a group of messages' last message's, a unit's or a deal's own event_date
SPAN_END = "event_date_end"
# columns a table made before them lacks: writes to such a table leave them out, and a filter
# on them reads around them (``filters.compile_filter`` sees the table's own columns)
LATER_COLUMNS = frozenset({SPAN_END})


def vector_entry_schema(generation: Generation) -> pa.Schema:
    """The schema of a generation table; its metadata records the generation spec."""
    spec = generation.spec
    fields = [
        ("vector_id", pa.string()),
        ("chunk_ref", pa.string()),
        ("source_id", pa.string()),
        ("collection", pa.string()),
        ("doc_id", pa.string()),
        ("source_version", pa.string()),
        ("kind", pa.string()),
        ("source_type", pa.string()),
        ("section", pa.string()),
        ("block_key", pa.string()),
        ("content_hash", pa.string()),
        ("input_format", pa.string()),
        ("input_hash", pa.string()),
        ("text", pa.string()),
        ("tenant_id", pa.string()),
        ("acl_groups", pa.list_(pa.string())),
        ("tier", pa.string()),
        ("language", pa.string()),
        ("event_date", pa.string()),
        (SPAN_END, pa.string()),
        *PROMOTED_COLUMNS,
        ("metadata", pa.string()),
        ("backend_spec", pa.string()),
        ("dim", pa.int32()),
        ("normalized", pa.bool_()),
        ("generation", pa.string()),
        ("namespace", pa.string()),
        ("run_id", pa.string()),
        ("vector", pa.list_(pa.float32(), spec.dim)),
    ]
    meta = {
        "corpus_index.generation": generation.id,
        "corpus_index.spec": json.dumps(
            {
                "namespace": spec.namespace,
                "profile": spec.profile,
                "backend_spec": spec.backend_spec,
                "model_revision": spec.model_revision,
                "dim": spec.dim,
                "normalized": spec.normalized,
                "input_format": spec.input_format,
                "chunking": spec.chunking,
                "schema_version": spec.schema_version,
            },
            sort_keys=True,
        ),
    }
    return pa.schema(fields, metadata=meta)


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What one scoped replace did."""

    inserted: int
    deleted: int
    total: int


@dataclass(frozen=True, slots=True)
class Coverage:
    """How much of a table its indexes cover."""

    rows: int
    fts_unindexed: int
    ann_unindexed: int
    ann: str  # "ivf_pq" or "exact"
    tail_bound: int = 0  # the unindexed rows the table may hold (searched exactly)

    @property
    def within_bound(self) -> bool:
        """Whether the rows no index covers yet stay within the table's bound."""
        return max(self.fts_unindexed, self.ann_unindexed) <= self.tail_bound


def tail_bound(rows: int) -> int:
    """How many of a table's ``rows`` may stay outside its indexes: none under
    TAIL_ALWAYS_BELOW rows, else the larger of TAIL_MIN_ROWS and TAIL_SHARE of the rows."""
    if rows < TAIL_ALWAYS_BELOW:
        return 0
    return max(TAIL_MIN_ROWS, int(rows * TAIL_SHARE))


class GenerationStore:
    """Reads and writes the generation tables under one LanceDB URI."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.remote = urlsplit(uri).scheme in OBJECT_STORE_SCHEMES
        try:
            self.db = lance.connect(uri)
        except (RuntimeError, OSError, ValueError) as exc:
            if not self.remote:
                raise
            raise self._unreachable(exc) from None

    def names(self) -> list[str]:
        """The tables under the URI.

        Raises:
            StoreUnreachableError: an object store that cannot be listed (its endpoint is
                down, the bucket is missing, the credentials are refused).
        """
        try:
            return lance.table_names(self.db)
        except (RuntimeError, OSError, ValueError) as exc:
            if not self.remote:
                raise
            raise self._unreachable(exc) from None

    def _unreachable(self, exc: BaseException) -> StoreUnreachableError:
        return StoreUnreachableError(
            f"{self.uri}: the object store cannot be listed ({store_reason(exc)}); check its "
            "endpoint, bucket and credentials"
        )

    def exists(self, generation: Generation) -> bool:
        return generation.table_name in self.names()

    def searched(self, generation: Generation) -> Any | None:
        """The table a search of ``generation`` reads: None for a generation that holds no
        rows and so never made one.

        Raises:
            DamagedTableError: the registry records rows the store has no table for (it was
                deleted or lost: a search would find nothing and say so as "no hits").
        """
        if self.exists(generation):
            return self.table(generation)
        if generation.row_count > 0:
            raise DamagedTableError(
                f"generation {generation.id}'s table",
                f"{self.uri.rstrip('/')}/{generation.table_name}.lance",
                f"missing; the registry records {generation.row_count} rows",
            )
        return None

    def table(self, generation: Generation) -> Any:
        """The generation's table, opened.

        Raises:
            StoreUnreachableError: it failed to open because its object store cannot be
                listed (any other failure is raised as it was: the table's own).
        """
        try:
            return self.db.open_table(generation.table_name)
        except (RuntimeError, OSError, ValueError):
            if self.remote:
                self.names()  # StoreUnreachableError when the store itself is what failed
            raise

    def ensure(self, generation: Generation) -> Any:
        """The generation's table, made when it has none (with an id of its making in its
        schema's metadata, :meth:`created`)."""
        if self.exists(generation):
            return self.table(generation)
        schema = vector_entry_schema(generation)
        made = {**(schema.metadata or {}), CREATED_KEY: uuid.uuid4().hex.encode()}
        return self.db.create_table(
            generation.table_name, schema=schema.with_metadata(made), exist_ok=True
        )

    def created(self, generation: Generation) -> str:
        """The id the generation's table was made with: a table dropped (``corpus doctor
        --repair``) and made again under the same name has another, so a write recorded with
        the old id is known not to be in it. '' when there is no table, or the table was made
        before tables recorded one (an older home's: it keeps none until it is made again)."""
        if not self.exists(generation):
            return ""
        metadata = self.table(generation).schema.metadata or {}
        return bytes(metadata.get(CREATED_KEY, b"")).decode()

    def append(
        self, generation: Generation, collection: str, rows: pa.Table | pa.RecordBatchReader
    ) -> WriteResult:
        """Add the rows of a collection that has none in this generation, in one commit
        (``rows`` may be a stream: it is written as it is read)."""
        table = self.ensure(generation)
        before = int(table.count_rows())
        data = _conformed(rows, generation, table.schema)
        lance.retry_commits(lambda: table.add(data), table=table, attempts=_attempts(data))
        return WriteResult(
            inserted=int(table.count_rows()) - before,
            deleted=0,
            total=int(table.count_rows(predicates.eq("collection", collection))),
        )

    def replace_collection(
        self,
        generation: Generation,
        collection: str,
        rows: pa.Table | pa.RecordBatchReader,
        *,
        sources: Iterable[str] | None = None,
        keep: Iterable[str] = (),
    ) -> WriteResult:
        """Make the collection's rows in this generation exactly ``rows``, in one commit.

        New rows are inserted and rows no longer present are deleted in the same LanceDB
        transaction (``merge_insert`` keyed on ``vector_id``), so readers see the old state or
        the new one. Unchanged rows (same vector_id) are not rewritten. ``rows`` may be a
        stream; an error raised while it is read abandons the write uncommitted. With
        ``sources``, only rows of those sources may be deleted (a shard of the collection: the
        rows of the sources it does not own, or that did not change, stay). The rows of the
        sources in ``keep`` stay as they are (``rows`` holds none of theirs).
        """
        table = self.ensure(generation)
        rows = _conformed(rows, generation, table.schema)
        scope = predicates.eq("collection", collection)
        if sources is not None:
            scope = predicates.all_of([scope, predicates.is_in("source_id", sorted(set(sources)))])
        if kept := sorted(set(keep)):
            scope = predicates.all_of([scope, predicates.not_in("source_id", kept)])
        return _merge(table, rows, scope, collection)

    def collection_refs(
        self, generation: Generation, collection: str, *, where: str | None = None
    ) -> pa.Table:
        """``chunk_ref`` and ``source_id`` of every row the collection has in this generation
        (with ``where``, a predicate built by ``predicates``: of those rows that match it; the
        filter runs in LanceDB's scan, so only the matching rows' refs are read out)."""
        query = self._refs_query(generation, collection, where)
        if query is None:
            return _NO_REFS
        return query.to_arrow().select(list(_NO_REFS.column_names))

    def refs_outside(
        self,
        generation: Generation,
        collection: str,
        sources: pa.Array,
        *,
        also: pa.Array | None = None,
        where: str | None = None,
    ) -> pa.Table:
        """:meth:`collection_refs` of the rows whose source is none of ``sources``, or is one
        of ``also``; a row without a source is neither (as SQL's ``NOT IN`` reads a NULL).
        The rows' two columns are read :data:`REFS_BATCH` rows at a time and their sources
        tested in Arrow: a predicate naming every source of a large collection would be
        parsed and evaluated by LanceDB instead (0.4-0.55 s at 50,000 to 70,000 sources,
        about ten times the scan)."""
        query = self._refs_query(generation, collection, where)
        if query is None:
            return _NO_REFS
        known = sources.cast(pa.string())
        extra = None if also is None or not len(also) else also.cast(pa.string())
        out = [_NO_REFS]
        # each batch's test builds a hash set of ``sources``: few large batches, not many small
        for batch in query.to_batches(batch_size=REFS_BATCH):
            source = batch.column("source_id")
            stale = pc.invert(pc.is_in(source, value_set=known))
            if extra is not None:
                stale = pc.or_(stale, pc.is_in(source, value_set=extra))
            stale = pc.and_(pc.is_valid(source), stale)
            refs = pa.Table.from_batches([batch]).select(list(_NO_REFS.column_names))
            out.append(refs.filter(stale).cast(_NO_REFS.schema))
        return pa.concat_tables(out)

    def _refs_query(self, generation: Generation, collection: str, where: str | None) -> Any:
        """The scan of the collection's rows' refs (with ``where``, of those that match it),
        none when the generation holds none."""
        if not self.exists(generation):
            return None
        table = self.table(generation)
        mine = predicates.eq("collection", collection)
        n = int(table.count_rows(mine))  # at least as many as match ``where`` too
        if n == 0:
            return None
        scope = mine if where is None else predicates.all_of([mine, where])
        return table.search().where(scope).select(list(_NO_REFS.column_names)).limit(n + 1)

    def doc_ids_of_kind(self, generation: Generation, collection: str, kind: str) -> list[str]:
        """The ``doc_id`` of every row of ``kind`` the collection has in this generation (for
        ``group``: the group ids it holds rows of)."""
        if not self.exists(generation):
            return []
        table = self.table(generation)
        where = predicates.all_of(
            [predicates.eq("collection", collection), predicates.eq("kind", kind)]
        )
        n = int(table.count_rows(where))
        if n == 0:
            return []
        got = table.search().where(where).select(["doc_id"]).limit(n + 1).to_arrow()
        return [str(d) for d in got["doc_id"].to_pylist()]

    def replace_sources(
        self, generation: Generation, collection: str, rows: pa.Table, sources: Iterable[str]
    ) -> WriteResult:
        """Make the rows of ``sources`` (of ``collection``) exactly ``rows``, in one commit.

        Like :meth:`replace_collection`, but only the named sources' rows are compared and
        removed, so a change to one document costs one document: rows of other sources are
        not read or rewritten.
        """
        table = self.ensure(generation)
        scope = predicates.all_of(
            [
                predicates.eq("collection", collection),
                predicates.is_in("source_id", sorted(set(sources))),
            ]
        )
        if rows.num_rows == 0:  # only removals: one delete commit
            before = int(table.count_rows(scope))
            lance.retry_commits(lambda: table.delete(scope), table=table)
            return WriteResult(
                inserted=0,
                deleted=before - int(table.count_rows(scope)),
                total=int(table.count_rows(predicates.eq("collection", collection))),
            )
        return _merge(table, _conformed(rows, generation, table.schema), scope, collection)

    def delete_where(self, generation: Generation, predicate: str) -> int:
        if not self.exists(generation):
            return 0
        table = self.table(generation)
        before = int(table.count_rows())
        lance.retry_commits(lambda: table.delete(predicate), table=table)
        return before - int(table.count_rows())

    def version(self, generation: Generation) -> int:
        """The version of the generation's table (0 when it has none): it moves with every
        write, so figures measured at one version are stale at another."""
        return int(self.table(generation).version) if self.exists(generation) else 0

    def count(self, generation: Generation, predicate: str | None = None) -> int:
        if not self.exists(generation):
            return 0
        return int(self.table(generation).count_rows(predicate))

    def refresh_indexes(self, generation: Generation) -> Coverage:
        """Build the FTS, scalar and ANN indexes a table lacks, and bring them up to date
        (``optimize``: new rows indexed, small fragments compacted) once the rows they do not
        cover pass the table's :func:`tail_bound` or its small fragments pile up.

        Deleted rows do not call for it: search skips them whether or not an index still holds
        them, and ``corpus compact`` rebuilds the indexes of a table that held them."""
        table = self.ensure(generation)
        rows = int(table.count_rows())
        names = {idx.name: idx for idx in table.list_indices()}
        if rows:
            built = False
            if FTS_INDEX not in names:
                _create_fts_index(table)
                built = True
            for column in SCALAR_INDEX_COLUMNS:
                if scalar_index_name(column) not in names:
                    _create_scalar_index(table, column)
                    built = True
            if rows >= ANN_MIN_ROWS and ANN_INDEX not in names:
                _create_ann_index(table, rows, generation.spec.dim)
                built = True
            if not built:
                coverage = self.coverage(generation)
                small = int(table.stats()["fragment_stats"]["num_small_fragments"])
                if coverage.within_bound and small <= TAIL_MAX_SMALL_FRAGMENTS:
                    return coverage  # the tail stands: nothing changed since it was read
            lance.retry_commits(table.optimize, table=table)
        return self.coverage(generation)

    def coverage(self, generation: Generation) -> Coverage:
        if not self.exists(generation):
            return Coverage(rows=0, fts_unindexed=0, ann_unindexed=0, ann="exact")
        table = self.table(generation)
        rows = int(table.count_rows())
        names = {idx.name for idx in table.list_indices()}
        fts_unindexed = rows
        if FTS_INDEX in names:
            fts_unindexed = int(table.index_stats(FTS_INDEX).num_unindexed_rows)
        if ANN_INDEX in names:
            ann_unindexed = int(table.index_stats(ANN_INDEX).num_unindexed_rows)
            ann = "ivf_pq"
        else:
            ann_unindexed = 0  # exact search scans every row
            ann = "exact"
        return Coverage(
            rows=rows,
            fts_unindexed=fts_unindexed if rows else 0,
            ann_unindexed=ann_unindexed,
            ann=ann,
            tail_bound=tail_bound(rows),
        )

    def drop(self, generation: Generation) -> bool:
        if not self.exists(generation):
            return False
        self.db.drop_table(generation.table_name)
        return True


def scalar_index_name(column: str) -> str:
    return f"{column}_idx"


def _create_scalar_index(table: Any, column: str) -> None:
    from lancedb.index import BTree

    lance.retry_commits(
        lambda: table.create_index(column, config=BTree(), replace=True), table=table
    )


def _create_fts_index(table: Any) -> None:
    from lancedb.index import FTS

    lance.retry_commits(
        lambda: table.create_index(FTS_COLUMN, config=FTS(with_position=False), replace=True),
        table=table,
    )


def indexes_holding_rows() -> tuple[str, ...]:
    """The indexes of a generation table that keep what they held of deleted rows until they
    are built again: the scalar indexes (the rows' ids), the full-text index (their words) and
    the ANN index (their quantized vectors and row ids)."""
    return (*(scalar_index_name(c) for c in SCALAR_INDEX_COLUMNS), FTS_INDEX, ANN_INDEX)


def rebuild_after_deletion(table: Any) -> list[str]:
    """Build the scalar, full-text and ANN indexes of a generation ``table`` again from its
    live rows; returns their names.

    ``optimize`` brings an index up to date by adding new rows to it and keeps the files of what
    it held before, deleted rows included (a deleted document's id, its words, its vector's PQ
    codes, from which an approximation of the vector can be read back); a rebuilt index holds
    only the live rows, and the old index files belong to old versions only, which the cleanup
    after a deletion removes (an index of a table left empty is rebuilt empty). The ANN index is
    trained again (the costly part, minutes at 100,000 rows), with the parameters for the rows
    left; below ``ANN_MIN_ROWS`` it is dropped and search is exact. Indexes the table lacks are
    not created here.
    """
    present = {idx.name for idx in table.list_indices()}
    rebuilt = []
    for column in SCALAR_INDEX_COLUMNS:
        name = scalar_index_name(column)
        if name in present:
            _create_scalar_index(table, column)
            rebuilt.append(name)
    if FTS_INDEX in present:
        _create_fts_index(table)
        rebuilt.append(FTS_INDEX)
    if ANN_INDEX in present:
        rows = int(table.count_rows())
        if rows >= ANN_MIN_ROWS:
            _create_ann_index(table, rows, table.schema.field("vector").type.list_size)
        else:
            lance.retry_commits(lambda: table.drop_index(ANN_INDEX), table=table)
        rebuilt.append(ANN_INDEX)
    return rebuilt


def _create_ann_index(table: Any, rows: int, dim: int) -> None:
    config = _ann_config(rows, dim)
    lance.retry_commits(
        lambda: table.create_index("vector", config=config, replace=True), table=table
    )


class AnnParameters(NamedTuple):
    """How the IVF_PQ index of a table of ``rows`` vectors is built."""

    partitions: int  # IVF partitions: about sqrt(rows), so each holds about sqrt(rows) vectors
    sub_vectors: int  # PQ sub-vectors: 8 dimensions each where the dimension allows
    iterations: int = ANN_KMEANS_ITERATIONS  # k-means rounds training the partitions


def ann_parameters(rows: int, dim: int) -> AnnParameters:
    """The IVF_PQ parameters for ``rows`` vectors of ``dim`` dimensions: they grow with the
    table (1,000,000 rows: 1,000 partitions of about 1,000 vectors; at most 1,024)."""
    partitions = max(1, min(ANN_MAX_PARTITIONS, int(rows**0.5)))
    sub_vectors = next(s for s in (dim // 8, dim // 4, dim // 2, dim, 1) if s >= 1 and dim % s == 0)
    return AnnParameters(partitions, sub_vectors)


def _ann_config(rows: int, dim: int) -> Any:
    from lancedb.index import IvfPq

    params = ann_parameters(rows, dim)
    return IvfPq(
        distance_type="cosine",
        num_partitions=params.partitions,
        num_sub_vectors=params.sub_vectors,
        max_iterations=params.iterations,
    )


def _merge(
    table: Any, rows: pa.Table | pa.RecordBatchReader, scope: str, collection: str
) -> WriteResult:
    """Insert the rows ``table`` lacks and delete its rows within ``scope`` that ``rows`` lacks,
    in one commit (``merge_insert`` keyed on ``vector_id``), retried on a commit conflict
    unless ``rows`` is a stream."""
    result = lance.retry_commits(
        lambda: (
            table.merge_insert("vector_id")
            .when_not_matched_insert_all()
            .when_not_matched_by_source_delete(scope)
            .execute(rows)
        ),
        table=table,
        attempts=_attempts(rows),
    )
    return WriteResult(
        inserted=int(result.num_inserted_rows),
        deleted=int(result.num_deleted_rows),
        total=int(table.count_rows(predicates.eq("collection", collection))),
    )


def _attempts(rows: pa.Table | pa.RecordBatchReader) -> int:
    """A stream is read once: a write of one is not retried (its rows are gone)."""
    return 1 if isinstance(rows, pa.RecordBatchReader) else lance.COMMIT_ATTEMPTS


def _conformed(
    rows: pa.Table | pa.RecordBatchReader, generation: Generation, table: pa.Schema
) -> pa.Table | pa.RecordBatchReader:
    """``rows`` in the generation table's schema (a stream must already be in it), less the
    :data:`LATER_COLUMNS` the table (``table`` is its schema) was made without."""
    schema = vector_entry_schema(generation)
    if isinstance(rows, pa.RecordBatchReader) and not rows.schema.equals(schema):
        raise ValueError(f"rows stream schema differs from {generation.table_name}'s")
    lacking = [n for n in LATER_COLUMNS if n not in table.names]
    if not lacking:
        return rows if isinstance(rows, pa.RecordBatchReader) else rows.cast(schema)
    fitted = pa.schema([f for f in schema if f.name not in lacking], metadata=schema.metadata)
    if isinstance(rows, pa.RecordBatchReader):
        return pa.RecordBatchReader.from_batches(fitted, (b.select(fitted.names) for b in rows))
    return rows.cast(schema).select(fitted.names).cast(fitted)
