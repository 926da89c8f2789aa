"""Jobs over the asset graph: one per partitioning, so each can run on its own key."""

# no `from __future__ import annotations`: Dagster reads the op annotations at definition time

import hashlib
import json

import dagster as dg

from assets import CorpusPartitions, CorpusResource
from corpus_index.compaction import compact
from corpus_index.deletion import namespace_of, purge_collection
from corpus_index.homelock import EXCLUSIVE_TAGS
from corpus_index.lifecycle import RetireChoice, retire
from corpus_index.shards import split_key

INGEST_ASSETS = ["source_manifest", "parsed_blocks", "linked_groups", "embedding_inputs"]
EMBED_ASSETS = ["embeddings", "sidecars", "flat_exports", "index_rows"]


def generation_field(choices: list[RetireChoice]) -> dg.Field:
    """The ``generation`` config field: a choice among ``choices`` (the registry's generations
    when the code location loaded, each described), or text when there were none."""
    if not choices:
        return dg.Field(
            str,
            description="The generation to retire (g<NNNN>); the registry had none when the "
            "code location loaded: reload it to choose from a list.",
        )
    values = [dg.EnumValue(c.generation, description=c.description) for c in choices]
    # Dagster keys config types by name within a process: each set of choices gets its own
    digest = hashlib.sha256(json.dumps(choices, sort_keys=True).encode()).hexdigest()[:12]
    return dg.Field(
        dg.Enum(f"GenerationToRetire_{digest}", values),
        description="The generation to retire, from those the registry held when the code "
        "location loaded (reload it to see newer ones).",
    )


def build_retire_job(choices: list[RetireChoice]) -> dg.JobDefinition:
    """``retire_generation_job``, whose launchpad offers ``choices``."""

    @dg.op(
        name="retire_generation",
        config_schema={"generation": generation_field(choices)},
        description="Retire a generation and drop its table, after the safety window.",
    )
    def retire_generation(
        context: dg.OpExecutionContext, corpus: CorpusResource
    ) -> dg.Output[dict[str, object]]:
        """Refused (the run fails, naming why) for the ACTIVE generation, the rollback target,
        or one still inside its namespace's ``retire_after_hours``."""
        out = retire(corpus.open_home(), context.op_config["generation"])
        g = out.generation
        context.log.info(f"retired {g.id} ({g.spec.profile}); table dropped: {out.table_dropped}")
        value = {"generation": g.id, "status": g.status, "table_dropped": out.table_dropped}
        return dg.Output(
            value,
            metadata={
                "generation": g.id,
                "profile": g.spec.profile,
                "namespace": g.spec.namespace,
                "table": g.table_name,
                "table_dropped": out.table_dropped,
            },
        )

    @dg.job(
        name="retire_generation_job",
        description="Retire a READY or BUILDING generation that no longer serves.",
        tags=EXCLUSIVE_TAGS,  # it drops a table other runs may read: no run beside it
    )
    def retire_generation_job() -> None:
        retire_generation()

    return retire_generation_job


class PurgeConfig(dg.Config):  # type: ignore[misc]
    """A collection no longer in the configuration."""

    collection: str


@dg.op(description="Delete every source of a collection removed from the config, everywhere.")
def purge_collection_op(
    context: dg.OpExecutionContext, config: PurgeConfig, corpus: CorpusResource
) -> dg.Output[dict[str, object]]:
    """The collection's partition is removed once its data is gone, not before: a purge that
    fails leaves it, so the source sensor (or `corpus sync`) asks for the purge again."""
    c = corpus.open_home()
    if split_key(config.collection).collection in c.config.collections:
        raise ValueError(
            f"collection {config.collection!r} is still configured; remove it from "
            f"{c.config.path} to purge it"
        )
    name = split_key(config.collection).collection
    receipt = purge_collection(c, config.collection, namespace_of(c, name))
    context.instance.delete_dynamic_partition("collections", config.collection)
    sources = len(receipt.source_ids) if receipt else 0
    context.log.info(f"purged collection {config.collection}: {sources} sources")
    return dg.Output(
        {"collection": config.collection, "sources": sources},
        metadata={
            "collection": config.collection,
            "sources": sources,
            "receipt": receipt.path if receipt else "",
        },
    )


@dg.job(
    description="Purge a collection removed from the config from every generation and store.",
    tags=EXCLUSIVE_TAGS,  # it rewrites every generation and store: no run beside it
)
def purge_collection_job() -> None:
    purge_collection_op()


class CompactionConfig(dg.Config):  # type: ignore[misc]
    """Old LanceDB versions younger than this are kept (unless a deletion is pending purge)."""

    retention_hours: float = 24.0


@dg.op(description="LanceDB optimize and old-version cleanup; unused cache entries purged.")
def compact_op(
    context: dg.OpExecutionContext, config: CompactionConfig, corpus: CorpusResource
) -> dg.Output[dict[str, object]]:
    report = compact(corpus.open_home(), retention_hours=config.retention_hours)
    context.log.info(
        f"compacted {len(report.tables)} tables; {report.cache_entries_purged} cache entries "
        f"purged; {len(report.tombstones_purged)} deletions physically purged"
    )
    return dg.Output(
        report.to_json(),
        metadata={
            "tables": len(report.tables),
            "cache_entries_purged": report.cache_entries_purged,
            "tombstones_purged": len(report.tombstones_purged),
            "seconds": round(report.seconds, 2),
        },
    )


@dg.job(
    description="Compact every live index and cache table (see `corpus compact`).",
    # it rewrites every table's files and, with a deletion pending, removes every old version
    # and every `*.tmp` file: a step beside it would lose what it is writing
    tags=EXCLUSIVE_TAGS,
)
def compaction_job() -> None:
    compact_op()


compaction_schedule = dg.ScheduleDefinition(
    name="compaction_schedule",
    job=compaction_job,
    cron_schedule="15 3 * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Nightly compaction: FTS/ANN cover new rows, old versions and unused cache go.",
)


def build_jobs(p: CorpusPartitions, retire_choices: list[RetireChoice]) -> list[object]:
    """ingest (per collection), embed (per profile × collection), generation (per profile),
    promotion, rollback and retirement (offering ``retire_choices``)."""
    ingest_job = dg.define_asset_job(
        "ingest_job",
        selection=dg.AssetSelection.assets(*INGEST_ASSETS),
        description="Scan, parse and derive canonical inputs for one collection.",
    )
    embed_job = dg.define_asset_job(
        "embed_job",
        selection=dg.AssetSelection.assets(*EMBED_ASSETS),
        description="Embed one collection under one profile and write its rows into the profile's generation.",
    )
    generation_job = dg.define_asset_job(
        "generation_job",
        selection=dg.AssetSelection.assets("index_generation"),
        description="Refresh a profile generation's indexes and run its gates.",
    )
    promote_generation_job = dg.define_asset_job(
        "promote_generation_job",
        selection=dg.AssetSelection.assets("active_generation"),
        tags=EXCLUSIVE_TAGS,  # the pointer moves with no run beside it (lifecycle)
        description=(
            "Point a namespace at the READY generation named in the config (`generation`), "
            "whose gates all passed; with none named, record which one serves and move nothing."
        ),
    )
    rollback_generation_job = dg.define_asset_job(
        "rollback_generation_job",
        selection=dg.AssetSelection.assets("active_generation"),
        tags=EXCLUSIVE_TAGS,
        config={"ops": {"active_generation": {"config": {"action": "rollback", "generation": ""}}}},
        description="Point a namespace back at its previous ACTIVE generation, in one step.",
    )
    eval_report_job = dg.define_asset_job(
        "eval_report_job",
        selection=dg.AssetSelection.assets("retrieval_evals"),
        description="Refresh the retrieval_evals asset from the registry (corpus eval runs it).",
    )
    return [
        eval_report_job,
        ingest_job,
        embed_job,
        generation_job,
        promote_generation_job,
        rollback_generation_job,
        build_retire_job(retire_choices),
        purge_collection_job,
        compaction_job,
    ]
