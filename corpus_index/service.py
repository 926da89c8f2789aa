"""The operations of the pipeline over one home folder; the Dagster assets are thin calls to these.

Each ``*_step`` reads its inputs from the warehouse, does its work, writes its output, and
returns what happened (counts, check outcomes) for the caller to report.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index import gates, predicates
from corpus_index.cache import EmbeddingCache
from corpus_index.config import CorpusConfig, ProfileConfig, Settings
from corpus_index.embedders import Embedder, make_embedder
from corpus_index.embedding import build_inputs, embed_with_cache
from corpus_index.errors import ConfigError
from corpus_index.index_store import Coverage, GenerationStore, WriteResult
from corpus_index.records import BLOCK_SCHEMA, INPUT_SCHEMA, MANIFEST_SCHEMA, QUARANTINE_SCHEMA
from corpus_index.registry import Generation, GenerationSpec, Registry
from corpus_index.rows import build_rows
from corpus_index.sources import (
    ManifestResult,
    ParseResult,
    live_documents,
    parse_collection,
    scan_manifest,
)
from corpus_index.warehouse import Warehouse


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


@dataclass(slots=True)
class IndexRowsOutcome:
    """What the ``index_rows`` step did for one profile × collection."""

    covered: bool
    generation: str = ""
    rows: int = 0
    write: WriteResult | None = None
    gates: list[gates.Gate] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)


@dataclass(slots=True)
class GenerationOutcome:
    """What the ``index_generation`` step found for one profile's generation."""

    generation: Generation
    coverage: Coverage
    gates: list[gates.Gate]
    rows_by_collection: dict[str, int]


class Corpus:
    """One home folder and its configuration."""

    def __init__(self, settings: Settings, config: CorpusConfig | None = None) -> None:
        self.settings = settings
        self.config = config or settings.load()
        self.warehouse = Warehouse(settings.warehouse)
        self.registry = Registry(settings.registry_path)
        self._store: GenerationStore | None = None

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
        previous = self.warehouse.read("source_manifest", (collection,))
        result = scan_manifest(self.collection(collection), previous)
        self.warehouse.write("source_manifest", (collection,), result.table)
        return result

    def parse_step(self, collection: str) -> ParseResult:
        manifest = self._read("source_manifest", (collection,), MANIFEST_SCHEMA)
        result = parse_collection(
            self.collection(collection),
            manifest,
            self.warehouse.read("parsed_blocks", (collection,), BLOCK_SCHEMA),
            self.warehouse.read("quarantine", (collection,), QUARANTINE_SCHEMA),
        )
        # blocks first: a reader that sees the new quarantine list also sees the blocks it implies
        self.warehouse.write("parsed_blocks", (collection,), result.blocks)
        self.warehouse.write("quarantine", (collection,), result.quarantine)
        return result

    def inputs_step(self, collection: str) -> pa.Table:
        blocks = self._read("parsed_blocks", (collection,), BLOCK_SCHEMA)
        table = build_inputs(
            blocks, sections=self.config.sections, input_formats=self.input_formats()
        )
        self.warehouse.write("embedding_inputs", (collection,), table)
        return table

    # -- embedding and index (per profile × collection) ------------------------------------

    def embeddings_step(
        self, profile: str, collection: str, *, progress: Callable[[int, int], None] | None = None
    ) -> EmbeddingsOutcome:
        """Embed the partition's new input hashes; the rest come from the cache.

        The vectors are written (to the warehouse and the cache) only when every gate passed;
        otherwise the last good partition stays as it was.
        """
        if not self.config.profile_covers(profile, collection):
            return EmbeddingsOutcome(covered=False)
        p = self.profile(profile)
        spec = self.spec(profile)
        embedder = self.embedder(profile)
        inputs = self._read("embedding_inputs", (collection,), INPUT_SCHEMA)
        inputs = inputs.filter(pc.equal(inputs["input_format"], p.input_format))
        texts = dict(zip(inputs["input_hash"].to_pylist(), inputs["text"].to_pylist(), strict=True))
        cache = EmbeddingCache(
            self.settings.lance_uri,
            backend_spec=spec.backend_spec,
            revision=spec.model_revision,
            dim=spec.dim,
        )
        result = embed_with_cache(
            texts, embedder, cache, batch_size=max(p.batch_size, 32), progress=progress
        )
        outcome = EmbeddingsOutcome(
            covered=True,
            inputs=len(texts),
            embedded=result.embedded,
            cache_hits=result.cache_hits,
            tokens=result.tokens,
            cost_usd=result.cost_usd,
            dim=int(result.vectors.shape[1]) if result.vectors.ndim == 2 else 0,
            backend_spec=embedder.backend_spec,
        )
        outcome.gates = [
            gates.vectors_have_profile_dim(result.vectors, spec.dim, reported_dim=embedder.dim),
            gates.vectors_are_finite(result.vectors),
            gates.vector_norms_match_profile(result.vectors, normalized=spec.normalized),
            gates.vectors_share_one_backend_spec([embedder.backend_spec], spec.backend_spec),
            gates.vectors_match_their_inputs(result.hashes, list(texts)),
        ]
        if outcome.passed:
            table = result.to_table(spec.dim)
            fresh = set(result.fresh_hashes)
            if fresh:
                mask = pa.array([h in fresh for h in result.hashes])
                new = table.filter(mask)
                cache.put(
                    new["input_hash"].to_pylist(),
                    new["vector"]
                    .combine_chunks()
                    .values.to_numpy(zero_copy_only=False)
                    .reshape(-1, spec.dim),
                )
            self.warehouse.write("embeddings", (profile, collection), table)
        return outcome

    def sidecars_step(self, profile: str, collection: str) -> SidecarsOutcome:
        """RFC 0013 sidecars, one per document: written when their entries changed, removed with
        their document."""
        from corpus_index.sidecars import SidecarEntry, build_sidecar, read_sidecar, write_sidecar

        if (
            not self.config.profile_covers(profile, collection)
            or self.collection(collection).kind != "uw_deals"
        ):
            return SidecarsOutcome(covered=False)
        spec = self.spec(profile)
        folder = self.settings.exports / "sidecars" / profile / collection
        blocks = self._read("parsed_blocks", (collection,), BLOCK_SCHEMA)
        inputs = self._read("embedding_inputs", (collection,), INPUT_SCHEMA)
        inputs = inputs.filter(pc.equal(inputs["input_format"], spec.input_format))
        vectors = self._read("embeddings", (profile, collection), None)
        vec_index = {h: i for i, h in enumerate(vectors["input_hash"].to_pylist())}
        flat = vectors["vector"].combine_chunks()
        matrix = flat.values.to_numpy(zero_copy_only=False).reshape(-1, spec.dim)
        meta_by_doc: dict[str, dict[str, Any]] = {}
        for row in blocks.select(["doc_id", "metadata"]).to_pylist():
            meta_by_doc.setdefault(row["doc_id"], json.loads(row["metadata"] or "{}"))
        entries: dict[str, list[SidecarEntry]] = {}
        for inp in inputs.to_pylist():
            entries.setdefault(inp["doc_id"], []).append(
                SidecarEntry(
                    section=inp["section"],
                    block_key=inp["block_key"],
                    content_hash=inp["content_hash"],
                    vector=matrix[vec_index[inp["input_hash"]]].tolist(),
                    input_hash=inp["input_hash"],
                )
            )
        written = unchanged = 0
        for doc_id, doc_entries in sorted(entries.items()):
            path = folder / f"{doc_id}.embeddings.json"
            pins = [(e.block_key, e.content_hash, e.input_hash) for e in doc_entries]
            if path.is_file():
                old = read_sidecar(path, validate=False)
                old_pins = [
                    (b.get("block_key"), b.get("content_hash"), b.get("input_hash"))
                    for b in old.get("blocks", [])
                ]
                if old_pins == pins and old.get("embedder", {}).get("model") == spec.backend_spec:
                    unchanged += 1
                    continue
            meta = meta_by_doc.get(doc_id, {})
            sidecar = build_sidecar(
                uw_version=str(meta.get("uw_version", "1.1")),
                deal_id=str(meta.get("deal_id", doc_id)),
                backend_spec=spec.backend_spec,
                dim=spec.dim,
                input_format=spec.input_format,
                entries=doc_entries,
                revision=spec.model_revision,
                normalized=spec.normalized,
            )
            path.parent.mkdir(parents=True, exist_ok=True)
            write_sidecar(path, sidecar)
            written += 1
        removed = 0
        if folder.is_dir():
            for path in folder.rglob("*.embeddings.json"):
                doc_id = path.relative_to(folder).as_posix()[: -len(".embeddings.json")]
                if doc_id not in entries:
                    path.unlink()
                    removed += 1
        return SidecarsOutcome(
            covered=True, written=written, unchanged=unchanged, removed=removed, folder=str(folder)
        )

    def index_rows_step(self, profile: str, collection: str, *, run_id: str) -> IndexRowsOutcome:
        """Replace the collection's rows in the profile's live generation (write before delete)."""
        if not self.config.profile_covers(profile, collection):
            return IndexRowsOutcome(covered=False)
        generation = self.registry.open_generation(self.spec(profile), run_id=run_id)
        blocks = self._read("parsed_blocks", (collection,), BLOCK_SCHEMA)
        inputs = self._read("embedding_inputs", (collection,), INPUT_SCHEMA)
        vectors = self._read("embeddings", (profile, collection), None)
        rows = build_rows(generation, blocks=blocks, inputs=inputs, vectors=vectors, run_id=run_id)
        manifest = self._read("source_manifest", (collection,), MANIFEST_SCHEMA)
        live = {f"{collection}/{d}" for d in live_documents(manifest)}
        outcome = IndexRowsOutcome(covered=True, generation=generation.id, rows=rows.num_rows)
        outcome.gates = [
            gates.rows_have_tenant_and_acl(rows),
            gates.no_rows_from_removed_documents(rows, live),
        ]
        if outcome.passed:
            outcome.write = self.store.replace_collection(generation, collection, rows)
        return outcome

    def generation_step(self, profile: str, *, run_id: str | None = None) -> GenerationOutcome:
        """Bring the profile's generation's indexes up to date and evaluate its gates."""
        generation = self.registry.open_generation(self.spec(profile), run_id=run_id)
        self.store.ensure(generation)
        coverage = self.store.refresh_indexes(generation)
        ns = generation.spec.namespace
        collections = [c.name for c in self.config.collections_in(ns)]
        expected: dict[str, int] = {}
        for name in collections:
            inputs = self.warehouse.read("embedding_inputs", (name,), INPUT_SCHEMA)
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
        ready = all(g.passed for g in checks)
        generation = self.registry.record_build(
            generation.id,
            row_count=coverage.rows,
            checks={g.name: g.to_json() for g in checks},
            ready=ready,
        )
        return GenerationOutcome(
            generation=generation, coverage=coverage, gates=checks, rows_by_collection=actual
        )

    def _read(self, asset: str, partition: tuple[str, ...], schema: pa.Schema | None) -> pa.Table:
        table = self.warehouse.read(asset, partition, schema)
        if table is None:
            raise FileNotFoundError(
                f"{self.warehouse.path(asset, *partition)}: {asset} for {'/'.join(partition)} "
                "has not been materialized yet (run `corpus sync`)"
            )
        return table


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
    return reg.promote(target.id, run_id=run_id, action=action)
