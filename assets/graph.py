"""The asset graph of DESIGN §7, built for the partitions the configuration declares."""

import time
from collections.abc import Callable
from dataclasses import dataclass

import dagster as dg

from assets.resources import CorpusResource, writes
from corpus_index import steps
from corpus_index.conversation_timeline import WINDOW_MESSAGES, collection_timeline, picture
from corpus_index.eval_report import eval_report
from corpus_index.flat_exports import EXPORT_GATES
from corpus_index.gates import EMBEDDING_GATES, GENERATION_GATES, INDEX_ROW_GATES, Gate
from corpus_index.group_gates import LINKED_GROUP_GATES
from corpus_index.lifecycle import move_pointer, registry_view
from corpus_index.memory import releasing
from corpus_index.plots import bar_chart, markdown_image, save_png
from corpus_index.registry import Generation
from corpus_index.steps.eval_gate import compare_for_promotion, eval_plot

# Source changes flow from an ingest run to every profile's partitions by themselves
# (source_update_sensor starts the ingest; the daemon's automation sensor does the rest).
# With a daemon running, a profile added to corpus.yaml is built as soon as the code location
# reloads (its partitions are new): run `corpus plan-migration` before adding a priced one.
AUTOMATION = dg.AutomationCondition.eager()
# a profile's generation reads the index rows of only the collections the profile covers; the
# rest of its profile x collection partitions are never materialized, and "any dependency
# missing" would keep the automation from ever building it again
AUTOMATION_ACROSS_COLLECTIONS = AUTOMATION.without(~dg.AutomationCondition.any_deps_missing())

# Writers of a profile's generation table (LanceDB commits to one table) take one slot of this
# pool: the production instance (corpus_index.dagster_home) gives it one, so they run one at a
# time across runs while the other steps of different collections run side by side.
GENERATION_POOL = "generation_writes"

PARSE_CHECK = "every_document_parses"
GENERATIONS_CHECK = "generations_pass_their_checks"
EMBEDDING_CHECKS = EMBEDDING_GATES
# and the last of the linked-group checks: no group row without a group, once rows are written
INDEX_ROW_CHECKS = INDEX_ROW_GATES + LINKED_GROUP_GATES[3:]
GENERATION_CHECKS = GENERATION_GATES
LINKED_GROUP_CHECKS = LINKED_GROUP_GATES[:3]
PROGRESS_EVERY_S = 1.0  # a step's progress lines are logged at most this often (see PacedProgress)
# quarantined documents a parsed_blocks run names in its log and its `quarantine` metadata; the
# rest are counted (each log line is an event the run writes: a folder of broken files would
# otherwise write one each on every run)
QUARANTINE_SHOWN = 20
# refused sidecars an embeddings run names in its log, likewise; the rest are counted
SIDECARS_REFUSED_SHOWN = 20


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
    # a check that did not run is not passed: it shows as a warning that says NOT RUN, and
    # does not block the run (promotion decides what it means; see lifecycle.promote)
    return [
        dg.AssetCheckResult(
            check_name=g.name,
            passed=g.passed,
            severity=dg.AssetCheckSeverity.ERROR if g.ran else dg.AssetCheckSeverity.WARN,
            description=g.description if g.ran else f"NOT RUN: {g.description}",
            metadata={"status": g.status, **{k: v for k, v in g.metadata.items() if v is not None}},
        )
        for g in gates
    ]


def _skipped(checks: list[tuple[str, str]], why: str) -> list[dg.AssetCheckResult]:
    return [
        dg.AssetCheckResult(check_name=name, passed=True, metadata={"skipped": why})
        for name, _ in checks
    ]


class PacedProgress:
    """A step's progress lines passed to ``log`` at most one a ``every_s`` (each line is an
    event the run writes to its storage): a step shorter than that logs only its last line
    (:meth:`flush`), a long one a line each ``every_s`` at least, the latest then."""

    def __init__(
        self,
        log: Callable[[str], object],
        every_s: float = PROGRESS_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._every_s = every_s
        self._clock = clock
        self._last = clock()
        self._held: str | None = None

    def __call__(self, line: str) -> None:
        now = self._clock()
        if now - self._last >= self._every_s:
            self._log(line)
            self._last, self._held = now, None
        else:
            self._held = line

    def flush(self) -> None:
        """Log the line held back, if any."""
        if self._held is not None:
            self._log(self._held)
            self._held = None


def _profile_collection(context: dg.AssetExecutionContext) -> tuple[str, str]:
    key = context.partition_key
    assert isinstance(key, dg.MultiPartitionKey)  # noqa: S101 - Dagster guarantees the type here
    return key.keys_by_dimension["profile"], key.keys_by_dimension["collection"]


def build_assets(p: CorpusPartitions) -> list[dg.AssetsDefinition]:
    """Every asset of the graph, wired to ``p``'s partitions."""

    @dg.asset(partitions_def=p.collections, group_name="ingestion", kinds={"parquet"})
    @writes("collection")
    @releasing  # once the step's tables are freed, their memory goes back to the OS
    def source_manifest(
        context: dg.AssetExecutionContext, corpus: CorpusResource
    ) -> dg.MaterializeResult:
        """Every document of a collection with its size, mtime, raw sha256 and version, diffed against the last scan."""
        out = steps.source_manifest.run(corpus.open_home(), context.partition_key)
        r = out.manifest
        if out.receipt:
            context.log.info(f"deleted {r.removed} documents; receipt {out.receipt}")
        if r.held:
            context.log.warning(
                f"{r.held} records held as they were: their file cannot be read whole "
                "(see parsed_blocks' quarantine)"
            )
        return dg.MaterializeResult(
            metadata={
                "documents": r.documents,
                "added": r.added,
                "changed": r.changed,
                "unchanged": r.unchanged,
                "removed": r.removed,
                # records not found, kept because their file has a line (or is) unreadable
                "held": r.held,
                "deletion_receipt": dg.MetadataValue.path(out.receipt or ""),
                # what source_update_sensor compares with, so a collection ingested by
                # `corpus sync` is not ingested again by the daemon's first tick
                "fingerprint": out.fingerprint,
            }
        )

    @dg.asset(
        partitions_def=p.collections,
        group_name="ingestion",
        deps=[source_manifest],
        kinds={"parquet"},
        check_specs=[
            dg.AssetCheckSpec(
                PARSE_CHECK,
                asset="parsed_blocks",
                description=(
                    "every live document parses; one that stopped parsing keeps serving its "
                    "last good version, marked stale in the registry (not blocking: the other "
                    "documents' changes go on)"
                ),
                blocking=False,
                partitions_def=p.collections,
            )
        ],
    )
    @writes("collection")
    @releasing
    def parsed_blocks(
        context: dg.AssetExecutionContext, corpus: CorpusResource
    ) -> dg.MaterializeResult:
        """Parsed blocks of every live document of a collection, and the list of quarantined documents."""
        r = steps.parsed_blocks.run(corpus.open_home(), context.partition_key)
        fresh = r.new_quarantine
        for row in fresh[:QUARANTINE_SHOWN]:
            context.log.warning(f"quarantined {row['source_id']}: {row['error']}")
        if len(fresh) > QUARANTINE_SHOWN:
            context.log.warning(f"quarantined {len(fresh) - QUARANTINE_SHOWN} more documents")
        if earlier := r.quarantined - len(fresh):
            context.log.warning(
                f"{earlier} documents still quarantined from earlier runs "
                "(see the `quarantine` metadata)"
            )
        for note in r.notes[:QUARANTINE_SHOWN]:
            context.log.warning(f"note: {note['note']}")
        if len(r.notes) > QUARANTINE_SHOWN:
            context.log.warning(f"{len(r.notes) - QUARANTINE_SHOWN} more notes (see `notes`)")
        quarantine = r.quarantine.slice(0, QUARANTINE_SHOWN).to_pylist()
        quarantine_md = "\n".join(f"- `{q['source_id']}`: {q['error']}" for q in quarantine)
        if r.quarantined > QUARANTINE_SHOWN:
            quarantine_md += f"\n- ... and {r.quarantined - QUARANTINE_SHOWN} more"
        stale = [str(s["source_id"]) for s in r.stale]
        return dg.MaterializeResult(
            metadata={
                "blocks": r.block_rows,
                "parsed_documents": r.parsed_documents,
                "carried_documents": r.carried_documents,
                "quarantined": r.quarantined,
                "stale_documents": r.stale_documents,
                "quarantine": dg.MetadataValue.md(quarantine_md or "none"),
                # the documents this run quarantined, each with its file and reason
                "new_quarantine": dg.MetadataValue.json(r.new_quarantine),
                # what the documents this run parsed hold that was read past (an unknown key
                # of a message record), once per file: path, first line, documents, note
                "notes": dg.MetadataValue.json(r.notes),
            },
            check_results=[
                dg.AssetCheckResult(
                    check_name=PARSE_CHECK,
                    passed=r.quarantined == 0,
                    severity=dg.AssetCheckSeverity.ERROR,
                    metadata={
                        "quarantined": r.quarantined,
                        "stale_serving_last_good": len(stale),
                        "stale": ", ".join(stale[:20]),
                        "first_error": (r.quarantine["error"][0].as_py() if r.quarantined else ""),
                    },
                )
            ],
        )

    @dg.asset(
        partitions_def=p.collections,
        group_name="ingestion",
        deps=[parsed_blocks],
        check_specs=_specs("linked_groups", LINKED_GROUP_CHECKS, p.collections),
        kinds={"parquet"},
    )
    @writes("collection")
    @releasing
    def linked_groups(
        context: dg.AssetExecutionContext, corpus: CorpusResource
    ) -> dg.MaterializeResult:
        """Linked groups of a grouped collection's units (conversations and the like) with their members, and its identities, mentions and sightings; empty for other kinds."""
        paced = PacedProgress(context.log.info)
        r = steps.linked_groups.run(corpus.open_home(), context.partition_key, progress=paced)
        paced.flush()
        if r.verifier_refused:
            context.log.warning(
                f"answer verifier: its server refused {r.verifier_refused} of the "
                f"{r.verified} pairs put to it, so the scorer's choice stood; the first: "
                f"{r.verifier_refusal}"
            )
        for refused in r.merges_refused:
            context.log.warning(
                f"merge refused ({refused}): its merged identity was merged into another "
                "person before; applied, it would merge that person too"
            )
        if not r.grouped:
            return dg.MaterializeResult(
                metadata={"groups": 0, "skipped": "the collection's kind is not grouped"},
                check_results=_skipped(LINKED_GROUP_CHECKS, "the collection is not grouped"),
            )
        return dg.MaterializeResult(
            metadata={
                "units": r.units,
                "groups": r.groups,
                "members": r.members,
                "groups_by_type": dg.MetadataValue.json(r.by_type),
                "groups_not_indexed": r.unindexed,
                "group_inputs_cut": r.cut,
                "group_input_limit": r.input_limit,
                "identities": r.identities,
                "identities_discovered": r.discovered,
                "identity_mentions": sum(r.mentions_by_role.values()),
                "mentions_by_role": dg.MetadataValue.json(r.mentions_by_role),
                "identity_sightings": r.sightings,
                "identity_units_read": r.identity_read,
                "sightings_path": dg.MetadataValue.path(r.sightings_path),
                "merges_applied": r.merges,
                "merges_not_seen_here": r.merges_not_here,
                "merges_refused": dg.MetadataValue.json(r.merges_refused),
                "groups_reanchored": r.reanchored,
                "messages_relinked": r.relinked,
                "channels_relinked": r.channels_relinked,
                "channels_from_window": r.from_window,
                "results_reused": r.reused,
                "results_computed": r.computed,
                "group_rows_carried": r.carried,
                "groups_carried_unmade": r.unmade,
                "units_as_they_were": r.prints_kept,
                "rows_not_decoded": r.rows_not_decoded,
                "questions_unread": r.questions_unread,
                # pairs put to the collection's answer verifier (0 without one), and of those
                # the ones it gave no clear verdict on
                "answers_verified": r.verified,
                "answers_unverified": r.unverified,
                "answers_refused": r.verifier_refused,
                "answer_verifier_refusal": r.verifier_refusal,
                "written": r.passed,
            },
            check_results=_results(r.gates),
        )

    @dg.asset(
        partitions_def=p.collections,
        group_name="ingestion",
        deps=[linked_groups],
        kinds={"png"},
    )
    def conversation_timeline(
        context: dg.AssetExecutionContext, corpus: CorpusResource, config: TimelineConfig
    ) -> dg.MaterializeResult:
        """A picture of one channel's conversations (the busiest by default): each message a dot on its conversation's lane, an arc to the message it continues. Materialize it to look; syncs do not redraw it."""
        home = corpus.open_home()
        collection = context.partition_key
        try:
            t = collection_timeline(
                home.warehouse,
                collection,
                channel=config.channel,
                messages=config.messages,
                hours=config.hours,
            )
        except ValueError as exc:
            raise dg.Failure(description=f"{collection}: {exc}") from exc
        if t is None:
            return dg.MaterializeResult(
                metadata={"skipped": "no conversation links: not grouped, or not linked yet"}
            )
        png = picture(t, collection)
        path = save_png(png, home.settings.reports / f"conversations-{collection}.png")
        return dg.MaterializeResult(
            metadata={
                "picture": dg.MetadataValue.md(markdown_image(png, f"{t.channel} conversations")),
                "tenant": t.tenant_id,
                "channel": t.channel,
                "messages": t.messages,
                "conversations": t.conversations,
                "from": dg.MetadataValue.timestamp(t.start),
                "to": dg.MetadataValue.timestamp(t.end),
                "channels": dg.MetadataValue.json(t.channels),
                "earlier_not_drawn": t.earlier,
                "path": dg.MetadataValue.path(str(path)),
            }
        )

    @dg.asset(
        partitions_def=p.collections,
        group_name="ingestion",
        deps=[parsed_blocks, linked_groups],
        kinds={"parquet"},
    )
    @writes("collection")
    @releasing
    def embedding_inputs(
        context: dg.AssetExecutionContext, corpus: CorpusResource
    ) -> dg.MaterializeResult:
        """Canonical embedder input text and input_hash of every embeddable block, per input format."""
        written = steps.embedding_inputs.run(corpus.open_home(), context.partition_key)
        return dg.MaterializeResult(
            metadata={
                "inputs": written.rows,
                "input_formats": ", ".join(written.formats),
                "distinct_input_hashes": written.distinct_hashes,
            }
        )

    @dg.asset(
        partitions_def=p.profile_collection,
        group_name="embeddings",
        deps=[embedding_inputs],
        check_specs=_specs("embeddings", EMBEDDING_CHECKS, p.profile_collection),
        automation_condition=AUTOMATION,
        kinds={"lancedb", "parquet"},
    )
    @writes("collection")
    @releasing
    def embeddings(
        context: dg.AssetExecutionContext, corpus: CorpusResource, config: EmbeddingsConfig
    ) -> dg.MaterializeResult:
        """Vectors for every embeddable input of a collection under one profile, cache first."""
        profile, collection = _profile_collection(context)
        paced = PacedProgress(context.log.info)

        def progress(done: int, total: int) -> None:
            paced(
                f"{done}/{total} new inputs embedded or found in the cache "
                f"for {profile}/{collection}"
            )

        try:
            r = steps.embeddings.run(
                corpus.open_home(),
                profile,
                collection,
                progress=progress,
                run_id=context.run.run_id,
                retry_refused=config.retry_refused,
            )
        finally:
            paced.flush()  # how far it got, whether it finished or failed
        if not r.covered:
            return dg.MaterializeResult(
                metadata={"skipped": f"profile {profile} does not cover collection {collection}"},
                check_results=_skipped(EMBEDDING_CHECKS, "profile does not cover this collection"),
            )
        refused = list(r.sidecars_refused.items())
        for path, why in refused[:SIDECARS_REFUSED_SHOWN]:
            context.log.warning(f"sidecar {path} lent no vectors: {why}")
        if len(refused) > SIDECARS_REFUSED_SHOWN:
            context.log.warning(
                f"{len(refused) - SIDECARS_REFUSED_SHOWN} more sidecars lent no vectors "
                "(`sidecars_refused` counts them all)"
            )
        for row in r.refusals[:QUARANTINE_SHOWN]:
            context.log.warning(f"held back {row['source_id']} under {profile}: {row['error']}")
        if len(r.refusals) > QUARANTINE_SHOWN:
            context.log.warning(
                f"{len(r.refusals) - QUARANTINE_SHOWN} more refused inputs "
                "(`refused_inputs` counts them all)"
            )
        hit_rate = r.cache_hits / r.inputs if r.inputs else 1.0
        return dg.MaterializeResult(
            metadata={
                "inputs": r.inputs,
                "embedded": r.embedded,
                # inputs the embedder's server refused (no vector), the documents that hold
                # them (held back: a last good version keeps serving), the requests made to
                # find them, and the first QUARANTINE_SHOWN of them with their file and reason
                "refused_inputs": len(r.refused),
                "refused_documents": r.refused_documents,
                "refusal_requests": r.refusal_requests,
                "refused": dg.MetadataValue.json(
                    [
                        {k: row[k] for k in ("source_id", "path", "block_key", "error")}
                        for row in r.refusals[:QUARANTINE_SHOWN]
                    ]
                ),
                "cache_hits": r.cache_hits,
                "cache_misses": r.embedded,
                "from_sidecars": r.from_sidecars,
                "sidecars_refused": len(r.sidecars_refused),
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
        partitions_def=p.profile_collection,
        group_name="exports",
        deps=[embeddings],
        kinds={"json"},
        automation_condition=AUTOMATION,
    )
    @writes("collection")
    @releasing
    def sidecars(context: dg.AssetExecutionContext, corpus: CorpusResource) -> dg.MaterializeResult:
        """RFC 0013 sidecars (one ``<doc>.embeddings.json`` per document), every entry pinned to a content_hash."""
        profile, collection = _profile_collection(context)
        r = steps.sidecars.run(corpus.open_home(), profile, collection)
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
        group_name="exports",
        deps=[embeddings],
        check_specs=_specs("flat_exports", EXPORT_GATES, p.profile_collection),
        kinds={"json"},
        automation_condition=AUTOMATION,
    )
    @writes("collection")
    @releasing
    def flat_exports(
        context: dg.AssetExecutionContext, corpus: CorpusResource
    ) -> dg.MaterializeResult:
        """Flat-blob embedding exports per researcher (public and restricted apart) and collection centroids."""
        profile, collection = _profile_collection(context)
        r = steps.flat_exports.run(corpus.open_home(), profile, collection)
        if not r.covered:
            return dg.MaterializeResult(
                metadata={"skipped": "no flat exports for this profile and collection"},
                check_results=_skipped(EXPORT_GATES, "no flat exports here"),
            )
        return dg.MaterializeResult(
            metadata={
                "researchers": r.researchers,
                "public_rows": r.public_rows,
                "restricted_rows": r.restricted_rows,
                "removed": ", ".join(r.removed) or "none",
                "unchanged": r.unchanged,
                "written": r.written,
                "folder": dg.MetadataValue.path(r.folder),
            },
            check_results=_results(r.gates),
        )

    @dg.asset(
        partitions_def=p.profile_collection,
        group_name="index",
        deps=[embeddings],
        check_specs=_specs("index_rows", INDEX_ROW_CHECKS, p.profile_collection),
        automation_condition=AUTOMATION,
        kinds={"lancedb"},
        pool=GENERATION_POOL,
    )
    @writes("collection", "generation")
    @releasing
    def index_rows(
        context: dg.AssetExecutionContext, corpus: CorpusResource
    ) -> dg.MaterializeResult:
        """One collection's vector entries in its profile's live generation (written before old rows are removed)."""
        profile, collection = _profile_collection(context)
        r = steps.index_rows.run(corpus.open_home(), profile, collection, run_id=context.run.run_id)
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
                "rows_validated": r.built,
                "sources_touched": r.touched_sources,
                # sources with an input the embedder refused: their rows left as they were
                "sources_held": r.held_sources,
                "rows_written": w.inserted if w else 0,
                "rows_deleted": w.deleted if w else 0,
                "collection_rows": w.total if w else 0,
                "written": w is not None,
                "table_created": r.table_created,
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
        automation_condition=AUTOMATION_ACROSS_COLLECTIONS,
        kinds={"lancedb"},
        pool=GENERATION_POOL,
    )
    @writes("generation")
    @releasing
    def index_generation(
        context: dg.AssetExecutionContext, corpus: CorpusResource
    ) -> dg.MaterializeResult:
        """A profile's index generation: its table with current FTS and ANN indexes, and its stats."""
        r = steps.index_generation.run(
            corpus.open_home(), context.partition_key, run_id=context.run.run_id
        )
        g = r.generation
        eval_md: dict[str, dg.MetadataValue] = {}
        for name in ("recall@5", "mrr@10", "ndcg@10"):
            if name in r.eval:
                eval_md[f"eval_{name}"] = dg.MetadataValue.float(float(r.eval[name]))
        if r.eval_plot is not None:
            eval_md["eval_comparison"] = dg.MetadataValue.md(
                markdown_image(r.eval_plot, f"golden-set metrics, namespace {g.spec.namespace}")
            )
        return dg.MaterializeResult(
            metadata={
                **eval_md,
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
        check_specs=[
            dg.AssetCheckSpec(
                GENERATIONS_CHECK,
                asset="active_generation",
                description=(
                    "no generation of the namespace that is not retired has a failed check "
                    "(a blocking check that failed inside an automation run shows here)"
                ),
                blocking=False,
                partitions_def=p.namespaces,
            )
        ],
    )
    def active_generation(
        context: dg.AssetExecutionContext, corpus: CorpusResource, config: PromotionConfig
    ) -> dg.MaterializeResult:
        """Which generation serves a namespace's queries; the pointer moves only when a run names a generation to promote or asks to roll back."""
        c = corpus.open_home()
        ns = context.partition_key
        action = config.resolved_action()
        moved = False
        if action == "record":
            # "Materialize all" and a default launch land here: the state is recorded, the
            # pointer stays where the operator left it
            g: Generation | None = c.registry.active(ns)
        else:
            if action == "promote":
                # now it is a candidate: a generation that served before is compared with the
                # ACTIVE one here, not on each of its builds
                target = c.registry.require(config.generation)
                if target.spec.namespace == ns:
                    gate = compare_for_promotion(c, target)
                    if gate is not None:
                        context.log.info(f"eval gate for {target.id}: {gate.status}")
            move = move_pointer(
                c,
                ns,
                config.generation or None,
                action=action,
                run_id=context.run.run_id,
                expect_active=config.expect_active or None,
            )
            g, moved = move.generation, move.moved
            if move.note:
                context.log.info(move.note)
        previous = c.registry.previous(ns)
        view = registry_view(c, ns)
        failing = [r for r in view if r["status"] != "RETIRED" and "FAILED" in str(r["checks"])]
        chart = eval_plot(c, ns, highlight=g.id if g else None)
        return dg.MaterializeResult(
            check_results=[
                dg.AssetCheckResult(
                    check_name=GENERATIONS_CHECK,
                    passed=not failing,
                    severity=dg.AssetCheckSeverity.ERROR,
                    metadata={
                        "failing_generations": ", ".join(str(r["generation"]) for r in failing),
                        "failed": dg.MetadataValue.md(
                            "\n".join(f"- {r['generation']}: {r['checks']}" for r in failing)
                            or "none"
                        ),
                    },
                )
            ],
            metadata={
                **(
                    {
                        "eval_comparison": dg.MetadataValue.md(
                            markdown_image(chart, f"golden-set metrics, namespace {ns}")
                        )
                    }
                    if chart is not None
                    else {}
                ),
                "generation": g.id if g else "",
                "profile": g.spec.profile if g else "",
                "backend_spec": g.spec.backend_spec if g else "",
                "rows": g.row_count if g else 0,
                "previous": previous.id if previous else "",
                "action": action,
                "moved": moved,
                "generations": dg.MetadataValue.md(generations_table(view)),
            },
        )

    @dg.asset(
        group_name="evaluation",
        kinds={"duckdb"},
        deps=[dg.AssetDep(index_generation, partition_mapping=dg.AllPartitionMapping())],
        # a generation rebuilt by the automation re-evaluates its golden set: show it
        automation_condition=AUTOMATION,
    )
    def retrieval_evals(corpus: CorpusResource) -> dg.MaterializeResult:
        """Every retrieval evaluation the registry holds: `corpus eval` runs (BEIR-format
        datasets) per dataset, mode and generation, and each live generation's golden-set
        metrics, as a table and a bar chart."""
        c = corpus.open_home()
        report = eval_report(c.registry)
        rows = [
            "| dataset | mode | generation | backend | nDCG@10 | MRR@10 | R@5 | R@10 | R@100 | p50 ms |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in report.rows:
            figures = [
                f"{r[m]:.3f}" if isinstance(r.get(m), float | int) else ""
                for m in ("ndcg@10", "mrr@10", "recall@5", "recall@10", "recall@100")
            ]
            rows.append(
                f"| {r['dataset']} | {r['mode']} | {r['generation']} | "
                f"{r.get('backend_spec', '')} | {' | '.join(figures)} | "
                f"{r.get('latency_p50_ms', '')} |"
            )
        metadata: dict[str, dg.MetadataValue] = {
            "runs": dg.MetadataValue.int(report.runs),
            "evaluations": dg.MetadataValue.int(len(report.rows)),
            "fingerprint": dg.MetadataValue.text(report.fingerprint),
            "results": dg.MetadataValue.md("\n".join(rows) if report.rows else "no evals yet"),
        }
        if report.rows:
            series = {
                f"{r['dataset']} {r['mode']} {r['generation']}": {
                    k: float(r[k]) for k in ("ndcg@10", "mrr@10", "recall@5") if k in r
                }
                for r in report.rows
            }
            png = bar_chart(series, ["ndcg@10", "mrr@10", "recall@5"], title="retrieval evals")
            save_png(png, c.settings.reports / "retrieval-evals.png")
            metadata["chart"] = dg.MetadataValue.md(markdown_image(png, "retrieval evals"))
        return dg.MaterializeResult(metadata=metadata)

    return [
        retrieval_evals,
        source_manifest,
        parsed_blocks,
        linked_groups,
        conversation_timeline,
        embedding_inputs,
        embeddings,
        sidecars,
        flat_exports,
        index_rows,
        index_generation,
        active_generation,
    ]


class EmbeddingsConfig(dg.Config):  # type: ignore[misc]
    """Whether ``embeddings`` sends again the inputs the model's server refused before
    (``corpus sync --retry-refused``); otherwise they are held back unasked."""

    retry_refused: bool = False


class TimelineConfig(dg.Config):  # type: ignore[misc]
    """Which of a collection's channels ``conversation_timeline`` draws, and how much of it."""

    channel: str = ""  # as the links name it (``<source>/<channel>``); empty: the busiest
    messages: int = WINDOW_MESSAGES  # its newest messages
    hours: float = 0.0  # instead: the hours up to its newest message (0: by messages)


class PromotionConfig(dg.Config):  # type: ignore[misc]
    """What to do to a namespace's pointer. Nothing named: record which generation serves and
    move nothing. ``generation`` named: promote it. ``action: rollback``: back to the previous
    ACTIVE generation."""

    generation: str = ""
    action: str = "record"  # "record", "promote" (needs generation) or "rollback"
    # the generation that must serve now (empty: no check): a retry after the move committed
    # is a no-op, any other mismatch is refused
    expect_active: str = ""

    def resolved_action(self) -> str:
        """``record``, ``promote`` or ``rollback``; a named generation means promote it.

        Raises:
            ValueError: an unknown action, or ``promote`` without a generation.
        """
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}: use one of {', '.join(ACTIONS)}")
        if self.action == "rollback":
            return "rollback"
        if self.generation:
            return "promote"
        if self.action == "promote":
            raise ValueError(
                "promote needs the generation to promote: set `generation` (see the "
                "`generations` table in active_generation's metadata, or `corpus generations`)"
            )
        return "record"


ACTIONS = ("record", "promote", "rollback")


def generations_table(rows: list[dict[str, object]]) -> str:
    """A markdown table of a namespace's generations, the serving one marked."""
    if not rows:
        return "no generations yet"
    lines = [
        "| generation | profile | status | serving | rows | recall@5 | mrr@10 | ndcg@10 | checks |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        metrics = [
            f"{r[m]:.3f}" if isinstance(r[m], float) else ""
            for m in ("recall@5", "mrr@10", "ndcg@10")
        ]
        lines.append(
            f"| {r['generation']} | {r['profile']} | {r['status']} | "
            f"{'**serving**' if r['serving'] else ''} | {r['rows']} | {' | '.join(metrics)} | "
            f"{r['checks']} |"
        )
    return "\n".join(lines)
