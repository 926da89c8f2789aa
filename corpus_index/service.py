"""The operations of the pipeline over one home folder; the Dagster assets are thin calls to these.

Each ``*_step`` reads its inputs from the warehouse, does its work, writes its output, and
returns what happened (counts, check outcomes) for the caller to report.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus_index import expectations, gates, memory, predicates
from corpus_index.cache import EmbeddingCache
from corpus_index.config import CorpusConfig, ProfileConfig, Settings
from corpus_index.embedders import Embedder, make_embedder
from corpus_index.embedding import (
    CHECKED_KEY,
    INPUT_RULE_KEY,
    VECTORS_KEY,
    build_inputs_into,
    embed_with_cache,
    input_rule,
    reuse_split,
    vector_matrix,
    vectors_identity,
)
from corpus_index.errors import (
    ConfigError,
    DimensionMismatchError,
    NonFiniteVectorError,
    PromotionRefusedError,
    SidecarError,
)
from corpus_index.hashing import canonical_json, sha256_hex
from corpus_index.index_store import Coverage, GenerationStore, WriteResult, vector_entry_schema
from corpus_index.kinds import kind_of
from corpus_index.ordered import DocCursor, whole_documents
from corpus_index.records import (
    BLOCK_SCHEMA,
    INPUT_SCHEMA,
    MANIFEST_SCHEMA,
    QUARANTINE_SCHEMA,
    embedding_schema,
)
from corpus_index.registry import Generation, GenerationSpec, Registry
from corpus_index.rows import build_rows
from corpus_index.sources import (
    ManifestResult,
    ParseSummary,
    PreviousBlocks,
    live_documents,
    parse_into,
    scan_manifest,
)
from corpus_index.warehouse import KeyedReader, Warehouse, unpack_vectors


@dataclass(frozen=True, slots=True)
class InputsSummary:
    """What the ``embedding_inputs`` step wrote for one collection."""

    rows: int
    formats: list[str]
    distinct_hashes: int


@dataclass(slots=True)
class EmbeddingsOutcome:
    """What the ``embeddings`` step did for one profile × collection."""

    covered: bool
    inputs: int = 0
    embedded: int = 0
    cache_hits: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    dim: int = 0
    backend_spec: str = ""
    gates: list[gates.Gate] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)


@dataclass(slots=True)
class SidecarsOutcome:
    """What the ``sidecars`` step wrote for one profile × collection."""

    covered: bool
    written: int = 0
    unchanged: int = 0
    removed: int = 0
    folder: str = ""


# Above this many changed sources, ``index_rows`` rewrites the collection in one merge keyed on
# every row rather than naming each source in the merge's delete scope.
REPLACE_WHOLE_COLLECTION_ABOVE = 500


@dataclass(slots=True)
class IndexRowsOutcome:
    """What the ``index_rows`` step did for one profile × collection."""

    covered: bool
    generation: str = ""
    rows: int = 0  # rows the collection holds in the generation once written
    built: int = 0  # rows built and checked (the touched sources', or all when rebuilt)
    touched_sources: int = 0  # sources whose rows differed from the generation's
    write: WriteResult | None = None
    gates: list[gates.Gate] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)


# what ``index_rows`` reads of embedding_inputs to decide which sources' rows change
INPUT_REF_SCHEMA = pa.schema(
    [INPUT_SCHEMA.field(c) for c in ("chunk_ref", "source_id", "input_format")]
)
# what ``embeddings`` reads of embedding_inputs: the hashes of one format
INPUT_HASH_SCHEMA = pa.schema(
    [INPUT_SCHEMA.field("input_hash"), INPUT_SCHEMA.field("input_format")]
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

# ``sidecars`` checks, builds and records the sidecars of this many inputs' documents at a time
# (the due ones among them take one filtered read of the vectors per range)
SIDECAR_ROWS = 16384
# what ``sidecars`` reads of embedding_inputs: a document's pins and its sections
SIDECAR_INPUT_COLUMNS = [
    "doc_id",
    "section",
    "block_key",
    "content_hash",
    "input_format",
    "input_hash",
]
SIDECAR_INPUT_SCHEMA = pa.schema([INPUT_SCHEMA.field(c) for c in SIDECAR_INPUT_COLUMNS])
# what ``sidecars`` reads of parsed_blocks: each document's metadata
BLOCK_META_SCHEMA = pa.schema([BLOCK_SCHEMA.field("doc_id"), BLOCK_SCHEMA.field("metadata")])

# ``embeddings`` embeds, checks and writes this many vectors at a time
EMBED_WINDOW = 8192

# ``index_rows`` builds, checks and writes this many rows at a time: its memory follows the
# batch, not the collection. (Each batch is one Great Expectations validation, ~1 s of fixed cost.)
ROWS_PER_BATCH = 8192


# a table or one of its batches: what ``index_rows`` filters alike
_Rows = TypeVar("_Rows", pa.Table, pa.RecordBatch)


class _CheckedBatches:
    """Index rows of a collection, built batch by batch and checked before they are yielded.

    The first batch that fails a check stops the stream (the write it feeds is abandoned
    uncommitted); the gates report every batch checked until then.
    """

    def __init__(
        self,
        corpus: Corpus,
        generation: Generation,
        profile: str,
        collection: str,
        inputs: Iterable[pa.RecordBatch],
        blocks: Iterable[pa.RecordBatch],
        *,
        run_id: str,
    ) -> None:
        self.corpus, self.generation = corpus, generation
        self.profile, self.collection = profile, collection
        self.inputs, self.blocks, self.run_id = inputs, blocks, run_id
        self.schema = vector_entry_schema(generation)
        self.rows = 0
        self.tenant: list[gates.Gate] = []
        self.suite: list[gates.Gate] = []
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
            self._vectors = self.corpus._keyed("embeddings", (self.profile, self.collection))
        vectors = self._vectors.lookup(chunk["input_hash"])
        return build_rows(
            self.generation,
            blocks=blocks.through(chunk["doc_id"][-1].as_py()),
            inputs=chunk,
            vectors=vectors,
            run_id=self.run_id,
        )

    def reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(
            self.schema,
            (b for rows in self.batches() for b in rows.to_batches()),
        )

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


@dataclass(slots=True)
class GenerationOutcome:
    """What the ``index_generation`` step found for one profile's generation."""

    generation: Generation
    coverage: Coverage
    gates: list[gates.Gate]
    rows_by_collection: dict[str, int]
    eval: dict[str, Any] = field(default_factory=dict)
    eval_plot: bytes | None = None


class Corpus:
    """One home folder and its configuration."""

    def __init__(self, settings: Settings, config: CorpusConfig | None = None) -> None:
        memory.configure()
        self.settings = settings
        self.config = config or settings.load()
        self.warehouse = Warehouse(settings.warehouse)
        self.registry = Registry(settings.registry_path)
        self._store: GenerationStore | None = None
        self.last_receipt: str | None = None

    @property
    def store(self) -> GenerationStore:
        if self._store is None:
            self._store = GenerationStore(self.settings.lance_uri)
        return self._store

    def collection(self, name: str) -> Any:
        try:
            return self.config.collections[name]
        except KeyError:
            raise ConfigError(f"{self.config.path}: no collection {name!r} is configured") from None

    def profile(self, name: str) -> ProfileConfig:
        try:
            return self.config.profiles[name]
        except KeyError:
            raise ConfigError(f"{self.config.path}: no profile {name!r} is configured") from None

    @functools.cache  # noqa: B019 - one embedder per profile for this object's lifetime
    def embedder(self, profile: str) -> Embedder:
        p = self.profile(profile)
        return make_embedder(
            p.embedder,
            base_url=p.base_url,
            api_key_env=p.api_key_env,
            dimensions=p.dimensions,
            batch_size=p.batch_size,
            max_batch_tokens=p.max_batch_tokens,
            price_per_million_tokens=p.price_per_million_tokens,
        )

    def spec(self, profile: str) -> GenerationSpec:
        p = self.profile(profile)
        e = self.embedder(profile)
        normalized = p.normalized if p.normalized is not None else e.normalized
        return GenerationSpec(
            namespace=p.namespace,
            profile=p.name,
            backend_spec=e.backend_spec,
            model_revision=e.revision,
            dim=e.dim,
            normalized=normalized,
            input_format=p.input_format,
            chunking=p.chunking,
        )

    def input_formats(self) -> set[str]:
        return {p.input_format for p in self.config.profiles.values()}

    # -- ingestion (per collection) --------------------------------------------------------

    def manifest_step(self, collection: str) -> ManifestResult:
        """Scan the collection; a removed document is deleted from every store at once."""
        from corpus_index.deletion import propagate_deletion

        previous = self.warehouse.read("source_manifest", (collection,))
        result = scan_manifest(self.collection(collection), previous)
        changes = result.table.select(["source_id", "change"]).to_pylist()
        removed = [r["source_id"] for r in changes if r["change"] == "removed"]
        added = [r["source_id"] for r in changes if r["change"] == "added"]
        self.registry.lift_tombstones(added)
        receipt = propagate_deletion(
            self,
            collection,
            removed,
            namespace=self.collection(collection).namespace,
            reason="source file removed",
        )
        self.warehouse.write("source_manifest", (collection,), result.table)
        self.last_receipt = receipt.path if receipt is not None else None
        return result

    def parse_step(self, collection: str) -> ParseSummary:
        """Parse what changed; the blocks partition is rewritten a range of documents at a
        time, merging new blocks with those carried from the partition it replaces."""
        manifest = self._read("source_manifest", (collection,), MANIFEST_SCHEMA)
        key = ("parsed_blocks", (collection,))
        previous = None
        versions = self.warehouse.read(*key, columns=["doc_id", "source_version"])
        if versions is not None:
            previous = PreviousBlocks(
                versions=versions, batches=lambda: self.warehouse.batches(*key, BLOCK_SCHEMA)
            )
        # blocks first: a reader that sees the new quarantine list also sees the blocks it implies
        with self.warehouse.writer(*key, BLOCK_SCHEMA) as out:
            result = parse_into(
                out.write,
                self.collection(collection),
                manifest,
                previous,
                self.warehouse.read("quarantine", (collection,), QUARANTINE_SCHEMA),
            )
            out.commit()
        self.warehouse.write("quarantine", (collection,), result.quarantine)
        self.registry.set_stale(collection, result.stale)
        return result

    def inputs_step(self, collection: str) -> InputsSummary:
        """Rewrite the collection's inputs a range of documents at a time, reusing the rows of
        unchanged blocks from the partition it replaces."""
        blocks = ("parsed_blocks", (collection,))
        self._require(*blocks)
        key = ("embedding_inputs", (collection,))
        formats = self.input_formats()
        rule = input_rule(self.config.sections, formats)
        previous_rule = (self.warehouse.metadata(*key) or {}).get(INPUT_RULE_KEY)
        with self.warehouse.writer(*key, INPUT_SCHEMA.with_metadata({INPUT_RULE_KEY: rule})) as out:
            build_inputs_into(
                out.write,
                self.warehouse.batches(*blocks, BLOCK_SCHEMA),
                sections=self.config.sections,
                input_formats=formats,
                previous=self.warehouse.batches(*key) if previous_rule == rule else None,
                previous_rule=previous_rule,
                what=f"embedding_inputs of {collection}",
            )
            out.commit()
        keys = self._read(*key, columns=["input_format", "input_hash"])
        return InputsSummary(
            rows=keys.num_rows,
            formats=sorted(pc.unique(keys["input_format"]).to_pylist()),
            distinct_hashes=int(pc.count_distinct(keys["input_hash"]).as_py()),
        )

    # -- embedding and index (per profile × collection) ------------------------------------

    def embeddings_step(
        self,
        profile: str,
        collection: str,
        *,
        progress: Callable[[int, int], None] | None = None,
        run_id: str | None = None,
    ) -> EmbeddingsOutcome:
        """Embed the partition's new input hashes; the rest come from the previous partition
        or the cache.

        Vectors are embedded, checked and written EMBED_WINDOW at a time. The new partition
        replaces the old one only when every gate passed; otherwise the last good partition
        stays as it was. New vectors reach the cache only from a window whose vectors passed
        the per-vector checks, so a broken embedder never poisons it. The gates' outcomes are
        recorded on the profile's live generation, whose promotion requires them.
        """
        if not self.config.profile_covers(profile, collection):
            return EmbeddingsOutcome(covered=False)
        p = self.profile(profile)
        spec = self.spec(profile)
        embedder = self.embedder(profile)
        # only the hashes (the rest of the inputs' keys is not needed to embed), each once, in
        # the inputs' order (documents in doc_id order), as they are embedded: a window's texts,
        # and later a batch of index rows' vectors, sit in a row group or two of their files
        # (see Warehouse.keyed)
        hashes = pc.unique(
            self._read(
                "embedding_inputs",
                (collection,),
                INPUT_HASH_SCHEMA,
                where=pc.field("input_format") == p.input_format,
                columns=INPUT_HASH_SCHEMA.names,
            )["input_hash"]
        )
        cache = EmbeddingCache(
            self.settings.lance_uri,
            backend_spec=spec.backend_spec,
            revision=spec.model_revision,
            dim=spec.dim,
        )
        generation = self.registry.open_generation(spec, run_id=run_id)
        identity = vectors_identity(spec.backend_spec, spec.model_revision, spec.dim)
        # the partition as last written lends the vectors it holds (same embedder only); only
        # the hashes it lacks are looked up in the cache, and only the misses are embedded
        # (its hashes decide; its vectors are streamed into the new partition below)
        key = ("embeddings", (profile, collection))
        previous = self.warehouse.keyed(*key, "input_hash")
        reused, todo = reuse_split(
            # with each hash's row in the file: the rows lent are read by that, below
            pa.table(
                {"input_hash": previous.keys, "row": np.arange(len(previous.keys))}
            ).replace_schema_metadata(previous.metadata)
            if previous is not None
            else None,
            identity,
            hashes,
        )
        n_reused = reused.num_rows if reused is not None else 0
        unchanged = previous is not None and len(todo) == 0 and n_reused == len(previous.keys)
        outcome = EmbeddingsOutcome(
            covered=True,
            inputs=len(hashes),
            cache_hits=n_reused,
            dim=spec.dim,
            backend_spec=embedder.backend_spec,
        )
        # checked and written EMBED_WINDOW vectors at a time; the new partition replaces the old
        # only once every window passed, and a window's new vectors reach the cache only after
        # they passed the per-vector checks (dimension, finiteness, norm)
        per_vector: dict[str, list[gates.Gate]] = {"dim": [], "finite": [], "norm": []}
        written: list[pa.Array] = []  # the hashes given vectors, as Arrow (not Python strings)

        # a partition is committed only when every vector passed the per-vector checks, and it
        # records which: vectors it lends under the same checks are not checked again
        checked = canonical_json({"dim": spec.dim, "normalized": spec.normalized}).encode()
        lent_checked = previous is not None and previous.metadata.get(CHECKED_KEY) == checked

        def check(vectors: Any, window_hashes: pa.Array) -> bool:
            per_vector["dim"].append(
                gates.vectors_have_profile_dim(vectors, spec.dim, reported_dim=embedder.dim)
            )
            per_vector["finite"].append(gates.vectors_are_finite(vectors))
            per_vector["norm"].append(
                gates.vector_norms_match_profile(vectors, normalized=spec.normalized)
            )
            written.append(window_hashes)
            return all(g[-1].passed for g in per_vector.values())

        schema = embedding_schema(spec.dim).with_metadata(
            {VECTORS_KEY: identity, CHECKED_KEY: checked}
        )
        with self.warehouse.writer(*key, schema) as out, previous or contextlib.nullcontext():
            ok = True
            # the previous partition's rows that are lent, read from the same open file by
            # their row numbers (a filter per batch would rebuild the set of wanted hashes
            # once per batch)
            lent: Iterable[pa.Table] = ()
            if previous is not None and reused is not None and n_reused:
                mask = np.zeros(len(previous.keys), dtype=bool)
                mask[reused["row"].to_numpy()] = True
                lent = previous.select(pa.array(mask))
            for packed in lent:
                part = unpack_vectors(packed)
                if lent_checked:
                    written.append(part["input_hash"].combine_chunks())
                else:
                    ok = ok and check(
                        vector_matrix(part, spec.dim), part["input_hash"].combine_chunks()
                    )
                out.write(part)
            texts = (
                self._keyed("embedding_inputs", (collection,), columns=["input_hash", "text"])
                if len(todo)
                else None
            )
            for start in range(0, len(todo) if ok else 0, EMBED_WINDOW):
                window = todo.slice(start, EMBED_WINDOW)
                assert texts is not None
                try:
                    result = embed_with_cache(
                        _texts(texts, window),
                        embedder,
                        cache,
                        batch_size=max(p.batch_size, 32),
                        progress=_offset_progress(progress, start, len(todo)),
                    )
                except (DimensionMismatchError, NonFiniteVectorError) as exc:
                    return self._rejected_embeddings(generation, collection, outcome, exc)
                outcome.embedded += result.embedded
                outcome.cache_hits += result.cache_hits
                outcome.tokens += result.tokens
                outcome.cost_usd += result.cost_usd
                ok = check(result.vectors, pa.array(result.hashes, pa.string()))
                if not ok:
                    outcome.dim = int(result.vectors.shape[1]) if result.vectors.ndim == 2 else 0
                    break
                table = result.to_table(spec.dim)
                out.write(table)
                if result.fresh_hashes:
                    fresh = set(result.fresh_hashes)
                    new = table.filter(pa.array([h in fresh for h in result.hashes]))
                    cache.put(new["input_hash"].to_pylist(), vector_matrix(new, spec.dim))
                memory.release()  # what the window's reads and LanceDB's write freed
            if not per_vector["dim"]:  # nothing to embed at all: check the empty partition
                check(np.zeros((0, spec.dim), np.float32), pa.array([], pa.string()))
            outcome.gates = [
                gates.combine(per_vector["dim"]),
                gates.combine(per_vector["finite"], summed=("non_finite_vectors",)),
                gates.combine(per_vector["norm"], summed=("vectors_off_norm",)),
                gates.vectors_share_one_backend_spec([embedder.backend_spec], spec.backend_spec),
                gates.vectors_match_their_inputs(pa.chunked_array(written, pa.string()), hashes),
            ]
            self._record_partition_checks(generation, "embeddings", collection, outcome.gates)
            if outcome.passed and not unchanged:
                out.commit()
        return outcome

    def _rejected_embeddings(
        self,
        generation: Generation,
        collection: str,
        outcome: EmbeddingsOutcome,
        exc: DimensionMismatchError | NonFiniteVectorError,
    ) -> EmbeddingsOutcome:
        """The embedder itself rejected an answer: the gate it would have failed reports it
        like any other failure, and the others are marked failed as not evaluated."""
        failed = (
            "vectors_have_profile_dim"
            if isinstance(exc, DimensionMismatchError)
            else "vectors_are_finite"
        )
        outcome.gates = [
            gates.Gate(
                name,
                False,
                desc,
                {"error": str(exc)}
                if name == failed
                else {"not_evaluated": f"the embedder's answer was rejected ({failed})"},
            )
            for name, desc in gates.EMBEDDING_GATES
        ]
        self._record_partition_checks(generation, "embeddings", collection, outcome.gates)
        return outcome

    def sidecars_step(self, profile: str, collection: str) -> SidecarsOutcome:
        """RFC 0013 sidecars, one per document: written when their entries changed, removed with
        their document.

        The inputs are read in ``doc_id`` order, SIDECAR_ROWS rows of whole documents at a
        time, beside the pins recorded by the last run (``sidecar_pins``, in the same order):
        the step holds one range of documents, never the collection's keys.
        """
        from corpus_index.sidecars import SIDECAR_PINS_SCHEMA

        if (
            not self.config.profile_covers(profile, collection)
            or not kind_of(self.collection(collection)).sidecars
        ):
            return SidecarsOutcome(covered=False)
        spec = self.spec(profile)
        folder = self.settings.exports / "sidecars" / profile / collection
        inputs_key = ("embedding_inputs", (collection,))
        pins_key = ("sidecar_pins", (profile, collection))
        self._require(*inputs_key)
        ranges = whole_documents(
            self.warehouse.batches(
                *inputs_key, SIDECAR_INPUT_SCHEMA, columns=SIDECAR_INPUT_COLUMNS
            ),
            SIDECAR_INPUT_SCHEMA,
            SIDECAR_ROWS,
            what=str(self.warehouse.path("embedding_inputs", collection)),
        )
        # with no record of what was written (a home from before sidecar_pins), every file in
        # the folder is checked at the end against the documents seen
        pins_path = self.warehouse.path("sidecar_pins", profile, collection)
        recorded = pins_path.is_file()
        pins = DocCursor(
            self.warehouse.batches(*pins_key, SIDECAR_PINS_SCHEMA),
            SIDECAR_PINS_SCHEMA,
            what=str(pins_path),
        )
        work = _SidecarWork(self, spec, profile, collection, folder)
        seen: set[str] = set()
        with self.warehouse.writer(*pins_key, SIDECAR_PINS_SCHEMA) as out:
            for table in ranges:
                last = table["doc_id"][-1].as_py()
                mine = table.filter(pc.equal(table["input_format"], spec.input_format))
                out.write(work.range(mine, pins.through(last)))
                if not recorded:
                    seen.update(pc.unique(mine["doc_id"]).to_pylist())
                memory.release()
            work.remove_gone(pins.rest())
            if not recorded and folder.is_dir():
                for path in sorted(folder.rglob("*.embeddings.json")):
                    doc_id = path.relative_to(folder).as_posix()[: -len(".embeddings.json")]
                    if doc_id not in seen:
                        path.unlink()
                        work.removed += 1
            out.commit()
        return SidecarsOutcome(
            covered=True,
            written=work.written,
            unchanged=work.unchanged,
            removed=work.removed,
            folder=str(folder),
        )

    def index_rows_step(self, profile: str, collection: str, *, run_id: str) -> IndexRowsOutcome:
        """Replace the collection's rows in the profile's live generation (write before delete)."""
        if not self.config.profile_covers(profile, collection):
            return IndexRowsOutcome(covered=False)
        generation = self.registry.open_generation(self.spec(profile), run_id=run_id)
        spec = generation.spec
        manifest = self._read("source_manifest", (collection,), MANIFEST_SCHEMA)
        live = {f"{collection}/{d}" for d in live_documents(manifest)}
        # tombstones replay: a source deleted before this generation existed never enters it,
        # even from stale inputs (a source that really comes back lifts its tombstone at scan)
        dead = pa.array(
            sorted(
                t["source_id"]
                for t in self.registry.tombstones(namespace=spec.namespace)
                if t["collection"] == collection
            ),
            pa.string(),
        )

        def wanted(data: _Rows) -> _Rows:
            mask = pc.equal(data["input_format"], spec.input_format)
            if len(dead):
                mask = pc.and_(mask, pc.invert(pc.is_in(data["source_id"], dead)))
            return data.filter(mask)

        # what the collection must hold, against what it holds: only the sources whose rows
        # differ are rebuilt and rewritten. Every row of a generation has its input format and
        # embedder, so a chunk_ref (chunk and source version) names one vector_id. Only the
        # inputs' refs decide it: their other columns are read a batch of rows at a time below.
        inputs_key = ("embedding_inputs", (collection,))
        refs = wanted(self._read(*inputs_key, INPUT_REF_SCHEMA, columns=INPUT_REF_SCHEMA.names))
        present = self.store.collection_refs(generation, collection)
        added = refs.filter(pc.invert(pc.is_in(refs["chunk_ref"], present["chunk_ref"])))
        gone = present.filter(pc.invert(pc.is_in(present["chunk_ref"], refs["chunk_ref"])))
        touched = set(pc.unique(added["source_id"]).to_pylist()) | set(
            pc.unique(gone["source_id"]).to_pylist()
        )
        whole = len(touched) > REPLACE_WHOLE_COLLECTION_ABOVE or not present.num_rows
        n_wanted = refs.num_rows
        wanted_sources = pc.unique(refs["source_id"])
        del refs, added, gone
        # the inputs the rows are built from, with their texts: streamed for a whole collection,
        # read at once for a few sources
        inputs: Iterable[pa.RecordBatch]
        if whole:
            inputs = (wanted(b) for b in self.warehouse.batches(*inputs_key, INPUT_SCHEMA))
        else:
            scope = pa.array(sorted(touched), pa.string())
            inputs = wanted(
                self._read(*inputs_key, INPUT_SCHEMA, where=pc.field("source_id").isin(scope))
            ).to_batches()
        # the block columns a row carries (not the content: the input's text stands for it),
        # streamed beside the inputs for a whole collection, read at once for a few sources
        key = ("parsed_blocks", (collection,))
        blocks: Iterable[pa.RecordBatch]
        if whole:
            self._require(*key)
            blocks = self.warehouse.batches(*key, ROW_BLOCK_SCHEMA, columns=ROW_BLOCK_COLUMNS)
        else:
            blocks = self._read(
                *key,
                ROW_BLOCK_SCHEMA,
                where=pc.field("source_id").isin(scope),
                columns=ROW_BLOCK_COLUMNS,
            ).to_batches()
        outcome = IndexRowsOutcome(
            covered=True,
            generation=generation.id,
            rows=n_wanted,
            touched_sources=len(touched),
        )
        removed_gate = gates.no_rows_from_removed_documents(
            pa.table({"source_id": wanted_sources.sort()}), live
        )
        # rows are built, checked and written ROWS_PER_BATCH at a time, and every batch goes
        # to LanceDB in one commit: a batch that fails a check stops the stream and nothing is
        # committed, so the previous rows keep serving
        checked = _CheckedBatches(
            self, generation, profile, collection, inputs, blocks, run_id=run_id
        )
        try:
            if not removed_gate.passed or (not whole and not touched):
                checked.drain()  # report every check; write nothing
            elif whole and n_wanted and not present.num_rows:
                outcome.write = self.store.append(generation, collection, checked.reader())
            elif whole and n_wanted:
                outcome.write = self.store.replace_collection(
                    generation, collection, checked.reader()
                )
            else:  # a few sources (or none left): small enough to build before writing
                rows = checked.table()
                if checked.passed:
                    outcome.write = (
                        self.store.replace_collection(generation, collection, rows)
                        if whole
                        else self.store.replace_sources(generation, collection, rows, touched)
                    )
        except Exception:
            if checked.passed:
                raise
            outcome.write = None  # a batch failed its checks: the stream stopped, no commit
        if removed_gate.passed and not whole and not touched:
            outcome.write = WriteResult(inserted=0, deleted=0, total=present.num_rows)
        outcome.built = checked.rows
        outcome.gates = [checked.tenant_gate(), removed_gate, checked.suite_gate()]
        self._record_partition_checks(generation, "index_rows", collection, outcome.gates)
        if not outcome.passed:
            outcome.write = None
        return outcome

    def _record_partition_checks(
        self, generation: Generation, asset: str, collection: str, outcomes: list[gates.Gate]
    ) -> None:
        self.registry.record_checks(
            generation.id,
            {gates.check_key(asset, g.name, collection): g.to_json() for g in outcomes},
        )

    def required_checks(self, profile: str, *, for_rollback: bool = False) -> set[str]:
        """Every gate a generation of ``profile`` must have run and passed to be promoted:
        the embeddings and index_rows checks of each collection it covers, and its own.

        Rolling back skips the eval gate: the rollback target served before, and comparing it
        with the generation it replaces is exactly what a rollback overrides.
        """
        p = self.profile(profile)
        required = {
            gates.check_key(asset, name, c.name)
            for c in self.config.collections_in(p.namespace)
            if self.config.profile_covers(profile, c.name)
            for asset, checks in (
                ("embeddings", gates.EMBEDDING_GATES),
                ("index_rows", gates.INDEX_ROW_GATES),
            )
            for name, _ in checks
        }
        required |= {
            gates.check_key("index_generation", name)
            for name, _ in gates.GENERATION_GATES
            if not (for_rollback and name == gates.EVAL_GATE)
        }
        return required

    def generation_step(self, profile: str, *, run_id: str | None = None) -> GenerationOutcome:
        """Bring the profile's generation's indexes up to date and evaluate its gates."""
        generation = self.registry.open_generation(self.spec(profile), run_id=run_id)
        self.store.ensure(generation)
        coverage = self.store.refresh_indexes(generation)
        ns = generation.spec.namespace
        collections = [c.name for c in self.config.collections_in(ns)]
        expected: dict[str, int] = {}
        for name in collections:
            inputs = self.warehouse.read("embedding_inputs", (name,), columns=["input_format"])
            expected[name] = (
                0
                if inputs is None
                else int(
                    pc.sum(pc.equal(inputs["input_format"], generation.spec.input_format)).as_py()
                    or 0
                )
            )
        actual = {
            name: self.store.count(generation, predicates.eq("collection", name))
            for name in collections
        }
        mismatched = sorted(n for n in collections if expected[n] != actual[n])
        orphan_rows = coverage.rows - sum(actual.values())
        checks = [
            gates.Gate(
                "row_counts_reconcile",
                not mismatched,
                "rows per collection equal the embeddable inputs of that collection",
                {
                    "expected_rows": sum(expected.values()),
                    "actual_rows": sum(actual.values()),
                    "mismatched_collections": ", ".join(mismatched),
                },
            ),
            gates.Gate(
                "indexes_cover_every_row",
                coverage.fts_unindexed == 0 and coverage.ann_unindexed == 0,
                "the FTS and ANN indexes cover every row",
                {
                    "fts_unindexed": coverage.fts_unindexed,
                    "ann_unindexed": coverage.ann_unindexed,
                    "ann": coverage.ann,
                },
            ),
            gates.Gate(
                "no_orphan_vectors",
                orphan_rows == 0,
                "every row belongs to a collection of the namespace",
                {"orphan_rows": orphan_rows},
            ),
        ]
        eval_gate, metrics = self._eval_gate(generation)
        checks.append(eval_gate)
        keyed = {gates.check_key("index_generation", g.name): g.to_json() for g in checks}
        required = self.required_checks(profile)
        recorded = {**generation.checks, **keyed}
        # READY: built and every integrity gate passed; the eval gate is judged at promotion
        ready = all(
            recorded.get(name, {}).get("passed", False)
            for name in required
            if name != gates.check_key("index_generation", gates.EVAL_GATE)
        )
        self.registry.record_checks(generation.id, keyed, keep=required)
        generation = self.registry.record_build(
            generation.id, row_count=coverage.rows, checks={}, ready=ready
        )
        plot = self.eval_plot(ns, highlight=generation.id) if metrics else None
        return GenerationOutcome(
            generation=generation,
            coverage=coverage,
            gates=checks,
            rows_by_collection=actual,
            eval=metrics,
            eval_plot=plot,
        )

    def _eval_gate(self, generation: Generation) -> tuple[gates.Gate, dict[str, Any]]:
        """Evaluate ``generation`` on the golden set and compare it with the ACTIVE generation."""
        from corpus_index.evaluation import (
            GATE_METRICS,
            evaluate_generation,
            load_golden,
            regressions,
        )

        ns = self.config.namespaces[generation.spec.namespace]
        if ns.golden_set is None:
            return (
                gates.Gate(
                    gates.EVAL_GATE,
                    True,
                    "no golden set is configured for this namespace; nothing to compare",
                    {"skipped": f"namespaces.{ns.name}.golden_set is not set"},
                ),
                {},
            )
        golden = load_golden(ns.golden_set)
        metrics = evaluate_generation(self, generation, golden)
        self.registry.record_eval(generation.id, {"golden": metrics})
        active = self.registry.active(ns.name)
        baseline: dict[str, Any] = {}
        if active is not None and active.id != generation.id:
            baseline = active.eval.get("golden", {})
            stale = baseline.get("golden_sha256") != golden.sha256
            if stale and active.spec.profile in self.config.profiles:
                baseline = evaluate_generation(self, active, golden)
                self.registry.record_eval(active.id, {"golden": baseline})
        worse = regressions(metrics, baseline, ns.eval_tolerance) if baseline else {}
        detail: dict[str, Any] = {f"{m}": metrics.get(m) for m in GATE_METRICS} | {
            "baseline_generation": active.id if active is not None else "",
            "tolerance": ns.eval_tolerance,
            "regressed": ", ".join(f"{m} -{d:.3f}" for m, d in worse.items()),
            "queries": metrics.get("queries"),
        }
        for m in GATE_METRICS:
            if m in baseline:
                detail[f"active_{m}"] = baseline[m]
        if not baseline:
            what = (
                "no ACTIVE generation to compare with"
                if active is None or active.id != generation.id
                else "this is the ACTIVE generation"
            )
            detail["baseline"] = what
        return (
            gates.Gate(
                gates.EVAL_GATE,
                not worse,
                f"golden-set retrieval is not worse than the ACTIVE generation's beyond {ns.eval_tolerance}",
                detail,
            ),
            metrics,
        )

    def eval_plot(self, namespace: str, *, highlight: str | None = None) -> bytes | None:
        """A bar chart of the golden-set metrics of every non-retired generation of
        ``namespace``, saved as ``<home>/reports/eval-<namespace>.png``; the PNG bytes."""
        from corpus_index.evaluation import GATE_METRICS
        from corpus_index.plots import bar_chart, save_png

        series = {
            f"{g.id} {g.spec.profile} ({g.status})": g.eval["golden"]
            for g in self.registry.generations(namespace=namespace)
            if g.status != "RETIRED" and g.eval.get("golden")
        }
        if not series:
            return None
        label = next((k for k in series if highlight and k.startswith(f"{highlight} ")), None)
        png = bar_chart(
            series,
            GATE_METRICS,
            title=f"golden-set retrieval, namespace {namespace}",
            highlight=label,
        )
        save_png(png, self.settings.reports / f"eval-{namespace}.png")
        return png

    def _keyed(
        self, asset: str, partition: tuple[str, ...], *, columns: list[str] | None = None
    ) -> KeyedReader:
        """``Warehouse.keyed`` by ``input_hash``; a partition never written is an error naming
        its file."""
        self._require(asset, partition)
        reader = self.warehouse.keyed(asset, partition, "input_hash", columns=columns)
        assert reader is not None
        return reader

    def _read(
        self,
        asset: str,
        partition: tuple[str, ...],
        schema: pa.Schema | None = None,
        *,
        where: pc.Expression | None = None,
        columns: list[str] | None = None,
    ) -> pa.Table:
        """Like ``Warehouse.read``, but a partition never written is an error naming its file."""
        self._require(asset, partition)
        table = self.warehouse.read(asset, partition, schema, where=where, columns=columns)
        assert table is not None
        return table

    def _require(self, asset: str, partition: tuple[str, ...]) -> None:
        """Raises FileNotFoundError, naming the file, if the partition was never written."""
        path = self.warehouse.path(asset, *partition)
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: {asset} for {'/'.join(partition)} "
                "has not been materialized yet (run `corpus sync`)"
            )


def _texts(inputs: KeyedReader, hashes: pa.Array) -> dict[str, str]:
    """The canonical text of each of ``hashes`` (one input's text per hash: it is its hash)."""
    table = inputs.lookup(hashes)
    return dict(zip(table["input_hash"].to_pylist(), table["text"].to_pylist(), strict=True))


def promote(
    corpus: Corpus,
    namespace: str,
    generation_id: str | None = None,
    *,
    action: str = "promote",
    run_id: str | None = None,
) -> Generation:
    """Point ``namespace`` at a generation, atomically.

    ``action="promote"`` with no ``generation_id`` picks the newest READY generation of the
    namespace; ``action="rollback"`` goes back to the generation that was ACTIVE before.

    Raises:
        UnknownNamespaceError, MissingGenerationError, PromotionRefusedError.
    """
    from corpus_index.errors import MissingGenerationError, UnknownNamespaceError

    if namespace not in corpus.config.namespaces:
        raise UnknownNamespaceError(f"no namespace {namespace!r} is configured")
    reg = corpus.registry
    if action == "rollback":
        target = reg.previous(namespace)
        if target is None:
            raise MissingGenerationError(
                f"namespace {namespace!r} has no previous generation to roll back to"
            )
    elif generation_id:
        target = reg.require(generation_id)
        if target.spec.namespace != namespace:
            raise MissingGenerationError(
                f"generation {generation_id} serves namespace {target.spec.namespace!r}, not {namespace!r}"
            )
    else:
        candidates = [
            g for g in reg.generations(namespace=namespace) if g.status in ("READY", "ACTIVE")
        ]
        if not candidates:
            raise MissingGenerationError(
                f"namespace {namespace!r} has no READY generation (run `corpus sync` first)"
            )
        target = candidates[-1]
    if target.spec.profile not in corpus.config.profiles:
        raise PromotionRefusedError(
            f"generation {target.id} was built by profile {target.spec.profile!r}, which is no "
            "longer configured, so its queries could not be embedded; add the profile back to "
            f"{action} to it"
        )
    required = corpus.required_checks(target.spec.profile, for_rollback=action == "rollback")
    return reg.promote(target.id, run_id=run_id, action=action, required=required)


@dataclass(frozen=True, slots=True)
class RetireOutcome:
    """A retired generation and whether its table was dropped now."""

    generation: Generation
    table_dropped: bool


def retire(corpus: Corpus, generation_id: str) -> RetireOutcome:
    """Retire a generation and drop its table, once the namespace's safety window has passed.

    Never the ACTIVE generation nor the rollback target. Retiring again after a crash between
    the two steps finishes the job.

    Raises:
        MissingGenerationError, RetireRefusedError.
    """
    gen = corpus.registry.require(generation_id)
    ns = corpus.config.namespaces.get(gen.spec.namespace)
    window = ns.retire_after_hours if ns is not None else 0.0
    retired = corpus.registry.retire(gen.id, window_hours=window)
    dropped = corpus.store.drop(retired)
    return RetireOutcome(generation=retired, table_dropped=dropped)


def _offset_progress(
    progress: Callable[[int, int], None] | None, offset: int, total: int
) -> Callable[[int, int], None] | None:
    """A window's progress callback reporting against the whole step's total."""
    if progress is None:
        return None
    report = progress
    return lambda done, _window_total: report(offset + done, total)


PIN_SEP = "\x1f"  # between the block_key, content_hash and input_hash of a sidecar entry's pin


class _SidecarWork:
    """The sidecars of one range of documents at a time: which are due, building them,
    removing those of documents gone, and the pins to record (see ``Corpus.sidecars_step``)."""

    def __init__(
        self, corpus: Corpus, spec: Any, profile: str, collection: str, folder: Path
    ) -> None:
        self.corpus, self.spec, self.profile, self.collection = corpus, spec, profile, collection
        self.folder = folder
        identity = [spec.backend_spec, spec.model_revision, spec.input_format, spec.normalized]
        self._identity = canonical_json(identity) + "\n"
        self._folder = os.fspath(folder)
        self.written = self.unchanged = self.removed = 0
        self._metadata: DocCursor | None = None  # parsed_blocks' metadata, opened when first due
        self._vectors: KeyedReader | None = None  # the embeddings by hash, opened when first due

    def file(self, doc_id: str) -> str:
        """The document's sidecar file, built as a string (called for every document)."""
        return f"{self._folder}/{doc_id}.embeddings.json"

    def path(self, doc_id: str) -> Path:
        return Path(self.file(doc_id))

    def digest(self, pins: list[str]) -> str:
        """What a sidecar is written from: the embedder's identity and its entries' pins
        (each ``block_key``, ``content_hash`` and ``input_hash`` joined by PIN_SEP)."""
        return sha256_hex(self._identity + "\x1e".join(pins))

    def range(self, inputs: pa.Table, previous: pa.Table) -> pa.Table:
        """Bring the sidecars of ``inputs``' documents up to date; the pins to record for them.
        ``previous`` holds the pins recorded last time for the same range of doc_ids."""
        from corpus_index.sidecars import SIDECAR_PINS_SCHEMA, read_sidecar

        # each input's pin (block_key, content_hash, input_hash) joined in Arrow, then each
        # document's pins (its rows are contiguous: the range is in doc_id order) in Python
        pin_text = pc.binary_join_element_wise(
            inputs["block_key"], inputs["content_hash"], inputs["input_hash"], PIN_SEP
        ).to_pylist()
        spans: dict[str, tuple[int, int]] = {}
        doc_ids = inputs["doc_id"].to_pylist()
        start = 0
        for end in range(1, len(doc_ids) + 1):
            if end == len(doc_ids) or doc_ids[end] != doc_ids[start]:
                spans[doc_ids[start]] = (start, end)
                start = end
        # what each sidecar was written from, and its file's size and mtime then: an unchanged
        # document whose file nobody touched is skipped without opening it
        digests = {
            doc_id: self.digest(pin_text[start:end]) for doc_id, (start, end) in spans.items()
        }
        known = dict(
            zip(
                previous["doc_id"].to_pylist(),
                zip(
                    previous["digest"].to_pylist(),
                    previous["size"].to_pylist(),
                    previous["mtime_ns"].to_pylist(),
                    strict=True,
                ),
                strict=True,
            )
        )
        self.remove_gone(previous.filter(pc.invert(pc.is_in(previous["doc_id"], inputs["doc_id"]))))
        # which sidecars are due: missing, touched, or written from other pins
        stats: dict[str, os.stat_result | None] = {}
        due: list[str] = []
        order = sorted(spans)
        for doc_id in order:
            st = stats[doc_id] = _stat(self.file(doc_id))
            fresh = st is not None and known.get(doc_id) == (
                digests[doc_id],
                st.st_size,
                st.st_mtime_ns,
            )
            if not fresh and st is not None:  # touched or never recorded: compare its pins
                try:
                    old = read_sidecar(self.path(doc_id), validate=False)
                except SidecarError:  # not JSON (a torn or foreign file): written again
                    old = {}
                old_pins = [
                    (b.get("block_key"), b.get("content_hash"), b.get("input_hash"))
                    for b in old.get("blocks", [])
                ]
                start, end = spans[doc_id]
                fresh = (
                    bool(old_pins)
                    and old_pins == [tuple(p.split(PIN_SEP)) for p in pin_text[start:end]]
                    and old.get("embedder", {}).get("model") == self.spec.backend_spec
                )
            if not fresh:
                due.append(doc_id)
        if due:
            self._build(due, inputs)
            stats.update((doc_id, _stat(self.path(doc_id))) for doc_id in due)
        self.written += len(due)
        self.unchanged += len(spans) - len(due)
        sizes, mtimes = [], []
        for doc_id in order:
            st = stats[doc_id]
            assert st is not None
            sizes.append(st.st_size)
            mtimes.append(st.st_mtime_ns)
        return pa.table(
            {
                "source_id": [f"{self.collection}/{doc_id}" for doc_id in order],
                "doc_id": order,
                "digest": [digests[doc_id] for doc_id in order],
                "size": sizes,
                "mtime_ns": mtimes,
            },
            schema=SIDECAR_PINS_SCHEMA,
        )

    def _build(self, due: list[str], inputs: pa.Table) -> None:
        """Write the due sidecars: one filtered read of the vectors for all of them, and the
        documents' metadata read forward from parsed_blocks."""
        from corpus_index.sidecars import SidecarEntry, build_sidecar, write_sidecar

        spec = self.spec
        rows_by_doc: dict[str, list[dict[str, Any]]] = {}
        for row in inputs.filter(
            pc.is_in(inputs["doc_id"], pa.array(due, pa.string()))
        ).to_pylist():
            rows_by_doc.setdefault(row["doc_id"], []).append(row)
        hashes = pc.unique(
            pa.array([r["input_hash"] for d in due for r in rows_by_doc[d]], pa.string())
        )
        if self._vectors is None:
            self._vectors = self.corpus._keyed("embeddings", (self.profile, self.collection))
        vectors = self._vectors.lookup(hashes)
        vec_index = {h: i for i, h in enumerate(vectors["input_hash"].to_pylist())}
        matrix = vector_matrix(vectors, spec.dim)
        if self._metadata is None:
            warehouse = self.corpus.warehouse
            self._metadata = DocCursor(
                warehouse.batches(
                    "parsed_blocks",
                    (self.collection,),
                    BLOCK_META_SCHEMA,
                    columns=BLOCK_META_SCHEMA.names,
                ),
                BLOCK_META_SCHEMA,
                what=str(warehouse.path("parsed_blocks", self.collection)),
            )
        blocks = self._metadata.through(due[-1])
        blocks = blocks.filter(pc.is_in(blocks["doc_id"], pa.array(due, pa.string())))
        meta_by_doc: dict[str, dict[str, Any]] = {}
        for row in blocks.to_pylist():
            meta_by_doc.setdefault(row["doc_id"], json.loads(row["metadata"] or "{}"))
        for doc_id in due:
            meta = meta_by_doc.get(doc_id, {})
            sidecar = build_sidecar(
                uw_version=str(meta.get("uw_version", "1.1")),
                deal_id=str(meta.get("deal_id", doc_id)),
                backend_spec=spec.backend_spec,
                dim=spec.dim,
                input_format=spec.input_format,
                entries=[
                    SidecarEntry(
                        section=r["section"],
                        block_key=r["block_key"],
                        content_hash=r["content_hash"],
                        vector=matrix[vec_index[r["input_hash"]]].tolist(),
                        input_hash=r["input_hash"],
                    )
                    for r in rows_by_doc[doc_id]
                ],
                revision=spec.model_revision,
                normalized=spec.normalized,
            )
            path = self.path(doc_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_sidecar(path, sidecar, validate=False)  # build_sidecar validated it

    def remove_gone(self, pins: pa.Table) -> None:
        """Remove the sidecars of documents whose pins were recorded but that have no inputs."""
        for doc_id in pins["doc_id"].to_pylist():
            path = self.path(doc_id)
            if path.is_file():
                path.unlink()
                self.removed += 1


def _stat(path: str | Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
