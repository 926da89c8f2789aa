"""The asset graph of DESIGN §7, built for the partitions the configuration declares."""

from dataclasses import dataclass

import dagster as dg

from assets.resources import CorpusResource
from corpus_index.errors import RetryableError
from corpus_index.gates import Gate
from corpus_index.service import promote

INGESTION_CHECKS: list[str] = []
EMBEDDING_CHECKS = [
    ("vectors_have_profile_dim", "Every vector has the profile's dimension."),
    ("vectors_are_finite", "No vector holds NaN or infinite values."),
    ("vector_norms_match_profile", "Vector norms are what the profile declares."),
    ("vectors_share_one_backend_spec", "All vectors come from the profile's backend_spec."),
    ("vectors_match_their_inputs", "Every vector's input_hash is in embedding_inputs, and back."),
]
INDEX_ROW_CHECKS = [
    ("rows_have_tenant_and_acl", "Every row has a tenant_id and at least one ACL group."),
    ("no_rows_from_removed_documents", "No row belongs to a removed document."),
]
GENERATION_CHECKS = [
    ("row_counts_reconcile", "Rows per collection equal that collection's embeddable inputs."),
    ("indexes_cover_every_row", "The FTS and ANN indexes cover every row."),
    ("no_orphan_vectors", "Every row belongs to a collection of the namespace."),
]


@dataclass(frozen=True)
class CorpusPartitions:
    """The partition definitions the assets are built on (declared in ``pipelines/``)."""

    collections: dg.PartitionsDefinition
    profiles: dg.PartitionsDefinition
    profile_collection: dg.MultiPartitionsDefinition
    namespaces: dg.PartitionsDefinition


def _specs(
    asset: str, checks: list[tuple[str, str]], partitions: dg.PartitionsDefinition
) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            name, asset=asset, description=desc, blocking=True, partitions_def=partitions
        )
        for name, desc in checks
    ]


def _results(gates: list[Gate]) -> list[dg.AssetCheckResult]:
    return [
        dg.AssetCheckResult(
            check_name=g.name,
            passed=g.passed,
            severity=dg.AssetCheckSeverity.ERROR,
            description=g.description,
            metadata={k: v for k, v in g.metadata.items() if v is not None},
        )
        for g in gates
    ]


def _skipped(checks: list[tuple[str, str]], why: str) -> list[dg.AssetCheckResult]:
    return [
        dg.AssetCheckResult(check_name=name, passed=True, metadata={"skipped": why})
        for name, _ in checks
    ]


def _profile_collection(context: dg.AssetExecutionContext) -> tuple[str, str]:
    key = context.partition_key
    assert isinstance(key, dg.MultiPartitionKey)  # noqa: S101 - Dagster guarantees the type here
    return key.keys_by_dimension["profile"], key.keys_by_dimension["collection"]


def build_assets(p: CorpusPartitions) -> list[dg.AssetsDefinition]:
    """Every asset of the graph, wired to ``p``'s partitions."""

    @dg.asset(partitions_def=p.collections, group_name="ingestion", kinds={"parquet"})
    def source_manifest(
        context: dg.AssetExecutionContext, corpus: CorpusResource
    ) -> dg.MaterializeResult:
        """Every document of a collection with its size, mtime, raw sha256 and version, diffed against the last scan."""
        r = corpus.corpus().manifest_step(context.partition_key)
        return dg.MaterializeResult(
            metadata={
                "documents": r.documents,
                "added": r.added,
                "changed": r.changed,
                "unchanged": r.unchanged,
                "removed": r.removed,
            }
        )

    @dg.asset(
        partitions_def=p.collections,
        group_name="ingestion",
        deps=[source_manifest],
        kinds={"parquet"},
    )
    def parsed_blocks(
        context: dg.AssetExecutionContext, corpus: CorpusResource
    ) -> dg.MaterializeResult:
        """Parsed blocks of every live document of a collection, and the list of quarantined documents."""
        r = corpus.corpus().parse_step(context.partition_key)
        for row in r.quarantine.to_pylist():
            context.log.warning(f"quarantined {row['source_id']}: {row['error']}")
        quarantine_md = "\n".join(
            f"- `{q['source_id']}`: {q['error']}" for q in r.quarantine.to_pylist()
        )
        return dg.MaterializeResult(
            metadata={
                "blocks": r.blocks.num_rows,
                "parsed_documents": r.parsed_documents,
                "carried_documents": r.carried_documents,
                "quarantined": r.quarantined,
                "stale_documents": r.stale_documents,
                "quarantine": dg.MetadataValue.md(quarantine_md or "none"),
            }
        )

    @dg.asset(
        partitions_def=p.collections,
        group_name="ingestion",
        deps=[parsed_blocks],
        kinds={"parquet"},
    )
    def embedding_inputs(
        context: dg.AssetExecutionContext, corpus: CorpusResource
    ) -> dg.MaterializeResult:
        """Canonical embedder input text and input_hash of every embeddable block, per input format."""
        table = corpus.corpus().inputs_step(context.partition_key)
        formats = sorted(set(table["input_format"].to_pylist()))
        return dg.MaterializeResult(
            metadata={
                "inputs": table.num_rows,
                "input_formats": ", ".join(formats),
                "distinct_input_hashes": len(set(table["input_hash"].to_pylist())),
            }
        )

    @dg.asset(
        partitions_def=p.profile_collection,
        group_name="embeddings",
        deps=[embedding_inputs],
        check_specs=_specs("embeddings", EMBEDDING_CHECKS, p.profile_collection),
        kinds={"lancedb", "parquet"},
    )
    def embeddings(
        context: dg.AssetExecutionContext, corpus: CorpusResource
    ) -> dg.MaterializeResult:
        """Vectors for every embeddable input of a collection under one profile, cache first."""
        profile, collection = _profile_collection(context)
        c = corpus.corpus()

        def progress(done: int, total: int) -> None:
            context.log.info(f"embedded {done}/{total} new inputs for {profile}/{collection}")

        try:
            r = c.embeddings_step(profile, collection, progress=progress)
        except RetryableError as exc:
            # transient (rate limits, 5xx, timeouts after the embedder's own retries): retry the
            # step later; permanent errors (bad request, wrong dimension) fail at once
            raise dg.RetryRequested(max_retries=2, seconds_to_wait=30) from exc
        if not r.covered:
            return dg.MaterializeResult(
                metadata={"skipped": f"profile {profile} does not cover collection {collection}"},
                check_results=_skipped(EMBEDDING_CHECKS, "profile does not cover this collection"),
            )
        hit_rate = r.cache_hits / r.inputs if r.inputs else 1.0
        return dg.MaterializeResult(
            metadata={
                "inputs": r.inputs,
                "embedded": r.embedded,
                "cache_hits": r.cache_hits,
                "cache_misses": r.embedded,
                "cache_hit_rate": round(hit_rate, 4),
                "tokens": r.tokens,
                "cost_usd": round(r.cost_usd, 6),
                "dim": r.dim,
                "backend_spec": r.backend_spec,
                "written": r.passed,
            },
            check_results=_results(r.gates),
        )

    @dg.asset(
        partitions_def=p.profile_collection, group_name="exports", deps=[embeddings], kinds={"json"}
    )
    def sidecars(context: dg.AssetExecutionContext, corpus: CorpusResource) -> dg.MaterializeResult:
        """RFC 0013 sidecars (one ``<doc>.embeddings.json`` per document), every entry pinned to a content_hash."""
        profile, collection = _profile_collection(context)
        r = corpus.corpus().sidecars_step(profile, collection)
        if not r.covered:
            return dg.MaterializeResult(
                metadata={"skipped": "no sidecars for this profile and collection"}
            )
        return dg.MaterializeResult(
            metadata={
                "written": r.written,
                "unchanged": r.unchanged,
                "removed": r.removed,
                "folder": dg.MetadataValue.path(r.folder),
            }
        )

    @dg.asset(
        partitions_def=p.profile_collection,
        group_name="index",
        deps=[embeddings],
        check_specs=_specs("index_rows", INDEX_ROW_CHECKS, p.profile_collection),
        kinds={"lancedb"},
    )
    def index_rows(
        context: dg.AssetExecutionContext, corpus: CorpusResource
    ) -> dg.MaterializeResult:
        """One collection's vector entries in its profile's live generation (written before old rows are removed)."""
        profile, collection = _profile_collection(context)
        r = corpus.corpus().index_rows_step(profile, collection, run_id=context.run.run_id)
        if not r.covered:
            return dg.MaterializeResult(
                metadata={"skipped": f"profile {profile} does not cover collection {collection}"},
                check_results=_skipped(INDEX_ROW_CHECKS, "profile does not cover this collection"),
            )
        w = r.write
        return dg.MaterializeResult(
            metadata={
                "generation": r.generation,
                "rows": r.rows,
                "rows_written": w.inserted if w else 0,
                "rows_deleted": w.deleted if w else 0,
                "collection_rows": w.total if w else 0,
                "written": w is not None,
            },
            check_results=_results(r.gates),
        )

    @dg.asset(
        partitions_def=p.profiles,
        group_name="index",
        deps=[
            dg.AssetDep(
                index_rows, partition_mapping=dg.MultiToSingleDimensionPartitionMapping("profile")
            )
        ],
        check_specs=_specs("index_generation", GENERATION_CHECKS, p.profiles),
        kinds={"lancedb"},
    )
    def index_generation(
        context: dg.AssetExecutionContext, corpus: CorpusResource
    ) -> dg.MaterializeResult:
        """A profile's index generation: its table with current FTS and ANN indexes, and its stats."""
        r = corpus.corpus().generation_step(context.partition_key, run_id=context.run.run_id)
        g = r.generation
        return dg.MaterializeResult(
            metadata={
                "generation": g.id,
                "status": g.status,
                "rows": r.coverage.rows,
                "ann": r.coverage.ann,
                "backend_spec": g.spec.backend_spec,
                "dim": g.spec.dim,
                "input_format": g.spec.input_format,
                "namespace": g.spec.namespace,
                **{f"rows[{k}]": v for k, v in r.rows_by_collection.items()},
            },
            check_results=_results(r.gates),
        )

    @dg.asset(
        partitions_def=p.namespaces,
        group_name="serving",
        deps=[dg.AssetDep(index_generation, partition_mapping=dg.AllPartitionMapping())],
        kinds={"duckdb"},
    )
    def active_generation(
        context: dg.AssetExecutionContext, corpus: CorpusResource, config: PromotionConfig
    ) -> dg.MaterializeResult:
        """Which generation serves a namespace's queries; materializing it moves the pointer atomically."""
        c = corpus.corpus()
        g = promote(
            c,
            context.partition_key,
            config.generation or None,
            action=config.action,
            run_id=context.run.run_id,
        )
        previous = c.registry.previous(context.partition_key)
        return dg.MaterializeResult(
            metadata={
                "generation": g.id,
                "profile": g.spec.profile,
                "backend_spec": g.spec.backend_spec,
                "rows": g.row_count,
                "previous": previous.id if previous else "",
                "action": config.action,
            }
        )

    return [
        source_manifest,
        parsed_blocks,
        embedding_inputs,
        embeddings,
        sidecars,
        index_rows,
        index_generation,
        active_generation,
    ]


class PromotionConfig(dg.Config):  # type: ignore[misc]
    """Which generation to promote; empty means the namespace's newest READY generation."""

    generation: str = ""
    action: str = "promote"  # or "rollback"
