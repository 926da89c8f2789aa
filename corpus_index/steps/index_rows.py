"""The ``index_rows`` step: a collection's rows in its profile's live generation, built and
checked a batch at a time, written before the rows they replace are removed."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index import expectations, gates, memory, predicates
from corpus_index.collection import CollectionConfig
from corpus_index.errors import LockLostError
from corpus_index.group_gates import group_rows_have_groups
from corpus_index.group_records import (
    GROUP_KIND,
    GROUP_SCHEMA,
    group_blocks,
    indexed,
    merged_by_doc,
)
from corpus_index.held_locks import LosableLock, confirm_held, held
from corpus_index.home import Home
from corpus_index.index_store import WriteResult, vector_entry_schema
from corpus_index.ordered import DocCursor, whole_documents
from corpus_index.records import BLOCK_SCHEMA, INPUT_SCHEMA, MANIFEST_SCHEMA
from corpus_index.refusals import held_sources
from corpus_index.registry import Generation
from corpus_index.rows import InputRows, build_rows, generation_inputs, tombstoned_sources
from corpus_index.sources import live_documents
from corpus_index.steps.checks import record_partition_checks
from corpus_index.warehouse import KeyedReader

# Above this many changed sources, ``index_rows`` rewrites the collection in one merge keyed on
# every row rather than naming each source in the merge's delete scope.
REPLACE_WHOLE_COLLECTION_ABOVE = 500
# ``index_rows`` builds, checks and writes this many rows at a time: its memory follows the
# batch, not the collection. (Each batch is one Great Expectations validation, ~1 s of fixed cost.)
ROWS_PER_BATCH = 8192

# what ``index_rows`` reads of embedding_inputs to decide which sources' rows change
INPUT_REF_SCHEMA = pa.schema(
    [INPUT_SCHEMA.field(c) for c in ("chunk_ref", "source_id", "input_format")]
)
# what ``index_rows`` reads of parsed_blocks (see rows.build_rows)
ROW_BLOCK_COLUMNS = [
    "chunk_ref",
    "source_id",
    "collection",
    "doc_id",
    "source_version",
    "kind",
    "source_type",
    "content_hash",
    "tenant_id",
    "acl_groups",
    "tier",
    "language",
    "event_date",
    "metadata",
]
ROW_BLOCK_SCHEMA = pa.schema([BLOCK_SCHEMA.field(c) for c in ROW_BLOCK_COLUMNS])


@dataclass(slots=True)
class IndexRowsOutcome:
    """What the ``index_rows`` step did for one profile × collection."""

    covered: bool
    generation: str = ""
    rows: int = 0  # rows the collection holds in the generation once written
    built: int = 0  # rows built and checked (the touched sources', or all when rebuilt)
    touched_sources: int = 0  # sources whose rows differed from the generation's
    held_sources: int = 0  # sources with a refused input: their rows left as they were
    write: WriteResult | None = None
    gates: list[gates.Gate] = field(default_factory=list)
    # the id the generation's table was made with (``GenerationStore.created``) once written:
    # a table made anew since holds none of these rows
    table_created: str = ""

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)


def run(home: Home, profile: str, collection: str, *, run_id: str) -> IndexRowsOutcome:
    """Replace the collection's rows in the profile's live generation (write before delete).

    ``collection`` is the partition key: for a shard (``<collection>~<nn>``) only the rows of
    the sources it owns are compared, written and removed; the rows carry the collection's
    name, so the generation holds one collection whatever its shards.
    """
    if not home.config.profile_covers(profile, collection):
        return IndexRowsOutcome(covered=False)
    config = home.collection(collection)
    name = config.name
    generation = home.registry.open_generation(home.spec(profile), run_id=run_id)
    spec = generation.spec
    manifest = home.read("source_manifest", (collection,), MANIFEST_SCHEMA)
    live = {f"{name}/{d}" for d in live_documents(manifest)}
    # a grouped collection's groups stand as blocks of their own (kind: group), live while
    # linked_groups holds them; their blocks are made below, of every group for a whole
    # write and of the touched ones for a few sources (a one-message sync touches a few)
    groups = home.warehouse.read("linked_groups", (collection,), GROUP_SCHEMA)
    groups = indexed(groups) if groups is not None else None
    if groups is not None and not groups.num_rows:
        groups = None
    if groups is not None:
        live |= set(groups["source_id"].to_pylist())
    # tombstones replay (``tombstoned_sources``)
    dead = tombstoned_sources(home.registry, spec.namespace, name)
    # the sources with an input the embedder refused (it has no vector) are held: their rows
    # stay as they are, a last good version serving, and none is built for a new one
    held = held_sources(home.warehouse, profile, collection)
    left_out = pc.unique(pa.concat_arrays([dead, held.cast(pa.string())]))

    def wanted(data: InputRows) -> InputRows:
        return generation_inputs(data, generation, left_out)

    # what the collection must hold, against what it holds: only the sources whose rows
    # differ are rebuilt and rewritten. Every row of a generation has its input format and
    # embedder, so a chunk_ref (chunk and source version) names one vector_id. Only the
    # inputs' refs decide it: their other columns are read a batch of rows at a time below.
    inputs_key = ("embedding_inputs", (collection,))
    refs = wanted(home.read(*inputs_key, INPUT_REF_SCHEMA, columns=INPUT_REF_SCHEMA.names))
    present = home.store.collection_refs(generation, name, where=_owned(config))
    serving_held = 0
    if len(held):
        kept = pc.is_in(present["source_id"], held)
        serving_held = int(pc.sum(kept).as_py() or 0)
        present = present.filter(pc.invert(kept))
    added = refs.filter(pc.invert(pc.is_in(refs["chunk_ref"], present["chunk_ref"])))
    gone = present.filter(pc.invert(pc.is_in(present["chunk_ref"], refs["chunk_ref"])))
    touched = set(pc.unique(added["source_id"]).to_pylist()) | set(
        pc.unique(gone["source_id"]).to_pylist()
    )
    whole = len(touched) > REPLACE_WHOLE_COLLECTION_ABOVE or not (present.num_rows + serving_held)
    # a shard's whole replace may delete only its own sources' rows: those whose rows change
    # (the rows of the other sources it holds are the same, so nothing of theirs is deleted)
    shard_scope = sorted(touched) if config.shard is not None else None
    n_wanted = refs.num_rows
    wanted_sources = pc.unique(refs["source_id"])
    del refs, added, gone
    # the inputs the rows are built from, with their texts: streamed for a whole collection,
    # read at once for a few sources
    inputs: Iterable[pa.RecordBatch]
    if whole:
        inputs = (wanted(b) for b in home.warehouse.batches(*inputs_key, INPUT_SCHEMA))
    else:
        scope = pa.array(sorted(touched), pa.string())
        inputs = wanted(
            home.read(*inputs_key, INPUT_SCHEMA, where=pc.field("source_id").isin(scope))
        ).to_batches()
    # the block columns a row carries (not the content: the input's text stands for it),
    # streamed beside the inputs for a whole collection, read at once for a few sources
    key = ("parsed_blocks", (collection,))
    blocks: Iterable[pa.RecordBatch]
    if whole and groups is None:
        home.require(*key)
        blocks = home.warehouse.batches(*key, ROW_BLOCK_SCHEMA, columns=ROW_BLOCK_COLUMNS)
    elif whole and groups is not None:  # grouped: the groups join in doc_id order
        units = home.read(*key, ROW_BLOCK_SCHEMA, columns=ROW_BLOCK_COLUMNS)
        blocks = merged_by_doc([units, group_blocks(groups, ROW_BLOCK_SCHEMA)]).to_batches()
    else:
        units = home.read(
            *key,
            ROW_BLOCK_SCHEMA,
            where=pc.field("source_id").isin(scope),
            columns=ROW_BLOCK_COLUMNS,
        )
        if groups is not None:
            mine = groups.filter(pc.is_in(groups["source_id"], scope))
            units = merged_by_doc([units, group_blocks(mine, ROW_BLOCK_SCHEMA)])
        blocks = units.to_batches()
    outcome = IndexRowsOutcome(
        covered=True,
        generation=generation.id,
        rows=n_wanted + serving_held,
        touched_sources=len(touched),
        held_sources=len(held),
    )
    # inputs of a document no longer live (stale inputs) are not written at all
    removed_gate = gates.no_rows_from_removed_documents(
        pa.table({"source_id": wanted_sources.sort()}), live, found_in="embedding_inputs"
    )
    # rows are built, checked and written ROWS_PER_BATCH at a time, and every batch goes
    # to LanceDB in one commit: a batch that fails a check stops the stream and nothing is
    # committed, so the previous rows keep serving
    checked = _CheckedBatches(home, generation, profile, collection, inputs, blocks, run_id=run_id)
    try:
        if not removed_gate.passed or (not whole and not touched):
            checked.drain()  # report every check; write nothing
        elif whole and n_wanted and not (present.num_rows + serving_held):
            outcome.write = home.store.append(generation, name, checked.reader())
        elif whole and n_wanted:
            outcome.write = home.store.replace_collection(
                generation, name, checked.reader(), sources=shard_scope, keep=held.to_pylist()
            )
        else:  # a few sources (or none left): small enough to build before writing
            rows = checked.table()
            if checked.passed:
                confirm_held()  # a step that lost its locks meanwhile writes nothing
                outcome.write = (
                    home.store.replace_collection(
                        generation, name, rows, sources=shard_scope, keep=held.to_pylist()
                    )
                    if whole
                    else home.store.replace_sources(generation, name, rows, touched)
                )
    except Exception:
        if checked.lost is not None:  # raised at the stream's end, which LanceDB wraps
            raise checked.lost from None
        if checked.passed:
            raise
        outcome.write = None  # a batch failed its checks: the stream stopped, no commit
    if removed_gate.passed and not whole and not touched:
        outcome.write = WriteResult(inserted=0, deleted=0, total=present.num_rows + serving_held)
    outcome.built = checked.rows
    # once written: the generation holds no group row of a group linked_groups lost
    held = home.store.doc_ids_of_kind(generation, name, GROUP_KIND)
    groups_gate = group_rows_have_groups(
        held, [] if groups is None else groups["group_id"].to_pylist()
    )
    if removed_gate.passed:  # once written: the rows the generation holds, whoever wrote them
        removed_gate = _no_removed_rows(home, generation, config, live, dead)
    outcome.gates = [checked.tenant_gate(), removed_gate, checked.suite_gate(), groups_gate]
    record_partition_checks(home, generation, "index_rows", collection, outcome.gates)
    if not outcome.passed:
        outcome.write = None
    if outcome.write is not None:
        outcome.table_created = home.store.created(generation)
    return outcome


def _no_removed_rows(
    home: Home,
    generation: Generation,
    config: CollectionConfig,
    live: set[str],
    dead: pa.Array,
) -> gates.Gate:
    """``no_rows_from_removed_documents`` on the generation's table: its rows of the collection
    (the shard's, for a shard) whose source is not live in the manifest or is tombstoned.

    The inputs the rows were built from never hold such a source (tombstones are filtered out
    of them, and a source the manifest lost has no blocks), so only the table can show a row
    the step did not remove: one written by a writer that lost its lock, or left by a write
    that failed halfway. The shard's predicate is evaluated in LanceDB's scan, the sources
    tested in Arrow (:meth:`~corpus_index.index_store.GenerationStore.refs_outside`); only the
    offending rows' refs are kept.
    """
    found = home.store.refs_outside(
        generation,
        config.name,
        pa.array(list(live), pa.string()),  # a set to test against: no order needed
        also=dead,
        where=_owned(config),
    )
    return gates.no_rows_from_removed_documents(found, live, removed_source_ids=dead.to_pylist())


def _owned(config: CollectionConfig) -> str | None:
    """The predicate on a generation's rows that keeps those of the sources a shard owns (no
    predicate unless the collection view is one shard): evaluated in LanceDB's scan, so a
    shard reads its own rows' refs, not the whole collection's."""
    if config.shard is None or config.shards <= 1:
        return None
    return predicates.in_hash_shard("source_id", config.shard, config.shards)


class _CheckedBatches:
    """Index rows of a collection, built batch by batch and checked before they are yielded.

    The first batch that fails a check stops the stream (the write it feeds is abandoned
    uncommitted); the gates report every batch checked until then.
    """

    def __init__(
        self,
        home: Home,
        generation: Generation,
        profile: str,
        collection: str,
        inputs: Iterable[pa.RecordBatch],
        blocks: Iterable[pa.RecordBatch],
        *,
        run_id: str,
    ) -> None:
        self.home, self.generation = home, generation
        self.profile, self.collection = profile, collection
        self.inputs, self.blocks, self.run_id = inputs, blocks, run_id
        self.schema = vector_entry_schema(generation)
        self.rows = 0
        self.tenant: list[gates.Gate] = []
        self.suite: list[gates.Gate] = []
        self.lost: LockLostError | None = None  # what ended the stream of reader()
        self._vectors: KeyedReader | None = None

    @property
    def passed(self) -> bool:
        return all(g.passed for g in (*self.tenant, *self.suite))

    def batches(self) -> Iterator[pa.Table]:
        """About ROWS_PER_BATCH rows at a time, whole documents each, built from the batch's
        inputs, their vectors and texts, and the blocks of the same documents (read forward
        beside the inputs: both are in doc_id order)."""
        what = f"index rows of {self.collection}"
        chunks = whole_documents(self.inputs, INPUT_SCHEMA, ROWS_PER_BATCH, what=f"{what} (inputs)")
        blocks = DocCursor(self.blocks, ROW_BLOCK_SCHEMA, what=f"{what} (parsed_blocks)")
        start = 0
        first = next(chunks, None)
        # no inputs at all: one empty batch, so that the checks still run and report
        for chunk in itertools.chain([first], chunks):
            memory.release()  # what the last batch's reads and LanceDB's write freed
            rows = self.schema.empty_table() if chunk is None else self._rows(chunk, blocks)
            self.rows += rows.num_rows
            self.tenant.append(gates.rows_have_tenant_and_acl(rows))
            self.suite.append(expectations.validate(rows, "index_rows"))
            if not self.passed:
                raise _BatchRejected(f"index rows {start}..{start + rows.num_rows} failed a check")
            start += rows.num_rows
            yield rows

    def _rows(self, chunk: pa.Table, blocks: DocCursor) -> pa.Table:
        """The rows of one batch of inputs (with their texts): only its vectors are read."""
        if self._vectors is None:
            self._vectors = self.home.keyed("embeddings", (self.profile, self.collection))
        vectors = self._vectors.lookup(chunk["input_hash"])
        return build_rows(
            self.generation,
            blocks=blocks.through(chunk["doc_id"][-1].as_py()),
            inputs=chunk,
            vectors=vectors,
            run_id=self.run_id,
        )

    def reader(self) -> pa.RecordBatchReader:
        """The batches as one stream to write. LanceDB commits once it has read the stream's
        end, so the locks this thread holds are confirmed there (LanceDB reads it on threads
        of its own, which hold none): a step that lost one ends the stream with the error
        (kept in :attr:`lost`), and the write is abandoned uncommitted."""
        return pa.RecordBatchReader.from_batches(self.schema, self._confirmed(held()))

    def _confirmed(self, locks: tuple[LosableLock, ...]) -> Iterator[pa.RecordBatch]:
        for rows in self.batches():
            yield from rows.to_batches()
        try:
            confirm_held(locks)
        except LockLostError as exc:
            self.lost = exc
            raise

    def table(self) -> pa.Table:
        try:
            return pa.concat_tables(list(self.batches()))
        except _BatchRejected:
            return self.schema.empty_table()

    def drain(self) -> None:
        self.table()

    def tenant_gate(self) -> gates.Gate:
        return gates.combine(self.tenant, summed=("bad_rows",))

    def suite_gate(self) -> gates.Gate:
        return gates.combine(self.suite, summed=("rows", "failed_expectations"))


class _BatchRejected(Exception):
    """A batch of index rows failed a blocking check (the gates say which)."""
