"""``corpus sync``: run the asset graph for every configured collection, in this process,
against the home's Dagster instance, so the runs show in the UI like any other."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import dagster as dg

from corpus_index.config import CollectionConfig, CorpusConfig, Settings
from corpus_index.deletion import delete_unlisted, drop_partition
from corpus_index.embedding import config_input_rule
from corpus_index.errors import ConfigError
from corpus_index.gates import NOT_RUN
from corpus_index.home import Home
from corpus_index.kinds import fingerprint, one_listing
from corpus_index.shards import partition_keys as shard_keys
from corpus_index.shards import split_key
from corpus_index.steps.source_manifest import withdrawals_pending
from pipelines.orphans import fail_orphaned_runs, process_tags

Progress = Callable[[str], None]
QUIET_RUN_CONFIG: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
# for runs whose expected failure is a refusal the CLI reports in one line (promote, rollback,
# retire): the stack trace stays in the run's event log, visible in the UI
SILENT_RUN_CONFIG: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@dataclass
class SyncReport:
    """What one sync did, summed for scripts (``--json``) and people."""

    embedded: int = 0
    cache_hits: int = 0
    documents: int = 0
    quarantined: int = 0
    collections: dict[str, dict[str, Any]] = field(default_factory=dict)
    generations: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed_runs: list[dict[str, Any]] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    purged_collections: list[str] = field(default_factory=list)
    # collections whose shard count changed: {collection: {"from": [...], "to": [...]}}
    reshards: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # partitions of sharded collections left alone: their files are as their last run saw them
    skipped_partitions: list[str] = field(default_factory=list)
    # documents that stopped parsing and serve their last good version (the registry's record)
    stale: list[dict[str, Any]] = field(default_factory=list)
    # documents this sync quarantined: source_id, source_version, path, line, error
    newly_quarantined: list[dict[str, Any]] = field(default_factory=list)
    # what the documents this sync parsed hold that was read past (an unknown key of a message
    # record), once per file: path, line (the first), documents, note
    notes: list[dict[str, Any]] = field(default_factory=list)
    # inputs the embedder's server refused, of every profile; the first of each run's with
    # their document: profile, source_id, path, block_key, error
    refused_inputs: int = 0
    refused: list[dict[str, Any]] = field(default_factory=list)
    # runs of this host left in flight by a process that ended (killed), failed by this sync
    orphaned_runs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed_runs

    def to_json(self) -> dict[str, Any]:
        return {
            "embedded": self.embedded,
            "cache_hits": self.cache_hits,
            "documents": self.documents,
            "quarantined": self.quarantined,
            "collections": self.collections,
            "generations": self.generations,
            "failed_runs": self.failed_runs,
            "runs": self.runs,
            "purged_collections": self.purged_collections,
            "reshards": self.reshards,
            "skipped_partitions": self.skipped_partitions,
            "stale": self.stale,
            "newly_quarantined": self.newly_quarantined,
            "notes": self.notes,
            "refused_inputs": self.refused_inputs,
            "refused": self.refused,
            "orphaned_runs": self.orphaned_runs,
        }


def _value(v: Any) -> Any:
    return getattr(v, "value", v)


def materializations(result: dg.ExecuteInProcessResult) -> dict[str, dict[str, Any]]:
    """Asset name -> metadata (plain values) of every materialization in a run."""
    out: dict[str, dict[str, Any]] = {}
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization  # type: ignore[union-attr]
        out[mat.asset_key.to_user_string()] = {k: _value(v) for k, v in mat.metadata.items()}
    return out


def failed_checks(result: dg.ExecuteInProcessResult) -> list[str]:
    """Names (``asset:check``) of the checks that failed in a run (not those that did not
    run, see :func:`check_failed`)."""
    failed = []
    for ev in result.get_asset_check_evaluations():
        if check_failed(ev):
            failed.append(f"{ev.asset_key.to_user_string()}:{ev.check_name}")
    return failed


def check_failed(evaluation: dg.AssetCheckEvaluation) -> bool:
    """Whether a check's evaluation is a failure: not passed, and not a check that did not
    run (a gate with nothing to judge, such as the eval gate of a namespace without a golden
    set, is recorded not passed with the status ``NOT RUN``, as a warning that blocks
    nothing)."""
    if evaluation.passed:
        return False
    status = evaluation.metadata.get("status")
    return getattr(status, "value", status) != NOT_RUN


def first_error(result: dg.ExecuteInProcessResult) -> str:
    """The first line of the first step failure of a run, or ''."""
    for ev in result.all_events:
        if ev.is_step_failure and ev.event_specific_data is not None:
            message = error_line(ev.event_specific_data.error)  # type: ignore[union-attr]
            if message:
                return message
    return ""


def error_line(error: Any) -> str:
    """The first line of what was raised, from a ``SerializableErrorInfo`` ('' for None).

    Dagster wraps what the step raised ("Error occurred while executing op ..."); the message
    of the innermost cause is the one that says what went wrong.
    """
    while error is not None and getattr(error, "cause", None) is not None:
        error = error.cause
    if error is None:
        return ""
    message = str(error.message).strip()
    cls = getattr(error, "cls_name", "") or ""
    prefix = f"{cls}: "
    # SerializableErrorInfo messages read "module.Class: text"; keep the text
    if ": " in message.split("\n")[0] and message.split(": ", 1)[0].endswith(cls):
        message = message.split(": ", 1)[1]
    elif message.startswith(prefix):
        message = message[len(prefix) :]
    return message.split("\n")[0]


def refresh_eval_report(
    defs: dg.Definitions, instance: dg.DagsterInstance, fingerprint: str, report: SyncReport
) -> None:
    """Materialize ``retrieval_evals`` through ``eval_report_job`` unless its latest
    materialization already shows the evaluations of ``fingerprint`` (so it is never missing
    after a sync, and the daemon's automation has nothing to catch up on)."""
    latest = instance.get_latest_materialization_event(dg.AssetKey("retrieval_evals"))
    if latest is not None and latest.asset_materialization is not None:
        shown = latest.asset_materialization.metadata.get("fingerprint")
        if getattr(shown, "value", None) == fingerprint:
            return
    result = defs.resolve_job_def("eval_report_job").execute_in_process(
        tags=process_tags(), instance=instance, raise_on_error=False, run_config=QUIET_RUN_CONFIG
    )
    record_run(report, "eval_report_job", "", result)


def record_run(report: SyncReport, job: str, label: str, result: dg.ExecuteInProcessResult) -> None:
    """Add a run to ``report``, and to its failed runs (checks and error named) if it failed."""
    report.runs.append(result.run_id)
    if result.success:
        return
    failure: dict[str, Any] = {
        "job": job,
        "partition": label,
        "run_id": result.run_id,
        "failed_checks": failed_checks(result),
    }
    error = first_error(result)
    if error:
        failure["error"] = error
    report.failed_runs.append(failure)


def partition_keys(config: CorpusConfig) -> list[str]:
    """Every configured partition key: a collection's name, or each of its shards'."""
    return [key for c in config.collections.values() for key in c.partitions]


def ensure_collection_partitions(instance: dg.DagsterInstance, config: CorpusConfig) -> list[str]:
    """Add a dynamic partition for every configured collection (for every shard of a sharded
    one); returns the ones added."""
    existing = set(instance.get_dynamic_partitions("collections"))
    missing = [key for key in partition_keys(config) if key not in existing]
    if missing:
        instance.add_dynamic_partitions("collections", missing)
    return missing


def purge_removed_collections(
    defs: dg.Definitions, config: CorpusConfig, instance: dg.DagsterInstance, report: SyncReport
) -> None:
    """Collections whose partition exists but that left the config: purged through
    ``purge_collection_job`` (so the UI shows it), which removes the partition once the purge
    succeeded (a failed one leaves it, to be purged again). Partitions of
    a collection still configured under another shard count are a re-shard's, not purged
    (see :func:`reshards`)."""
    gone = sorted(
        key
        for key in set(instance.get_dynamic_partitions("collections")) - set(partition_keys(config))
        if _collection_of(key) not in config.collections
    )
    for name in gone:
        result = defs.resolve_job_def("purge_collection_job").execute_in_process(
            tags=process_tags(),
            instance=instance,
            raise_on_error=False,
            run_config={
                "ops": {"purge_collection_op": {"config": {"collection": name}}},
                **QUIET_RUN_CONFIG,
            },
        )
        report.runs.append(result.run_id)
        if not result.success:
            report.failed_runs.append(
                {
                    "job": "purge_collection_job",
                    "partition": name,
                    "run_id": result.run_id,
                    "failed_checks": [],
                    "error": first_error(result),
                }
            )
            continue
        report.purged_collections.append(name)


class Reshard(NamedTuple):
    """A collection's change of shard count: its partitions before, and those to drop."""

    old: list[str]  # ``deals~00``..``deals~02`` of 3 shards (with those shared)
    dropped: list[str]  # the old ones the new count has not (none from 3 shards to 4)


def reshards(instance: dg.DagsterInstance, config: CorpusConfig) -> dict[str, Reshard]:
    """Collection -> its re-shard to carry out, for every configured collection whose
    partitions are not those of its shard count: ``deals`` once ``shards: 4`` is configured,
    ``deals~00``..``deals~02`` once 3 shards become 4 (no key is dropped then, so a key of
    the new count missing tells it). A sync that failed leaves the old keys beside the new
    ones: the old count is then the keys to drop (``deals`` beside ``deals~00``..), unless
    the keys are one count's whole set (8 shards to 4 leaves ``deals~00``..``deals~07``)."""
    found: dict[str, list[str]] = {}
    for key in sorted(instance.get_dynamic_partitions("collections")):
        name = _collection_of(key)
        if name in config.collections:
            found.setdefault(name, []).append(key)
    out: dict[str, Reshard] = {}
    for name, keys in found.items():
        new = config.collections[name].partitions
        if set(keys) == set(new):
            continue
        dropped = [k for k in keys if k not in new]
        whole = set(keys) == set(shard_keys(name, len(keys)))
        out[name] = Reshard(old=keys if whole or not dropped else dropped, dropped=dropped)
    return out


# a re-shard under way, by collection, until a sync that carried it out succeeds: from 3
# shards to 4 no partition key goes, so once a sync cut short added the new keys, the
# partitions alone no longer tell a retry that a re-shard is under way
PENDING_RESHARDS = "reshards-pending.json"


def pending_reshards(settings: Settings) -> dict[str, dict[str, list[str]]]:
    """The re-shards a sync began and none finished (see ``PENDING_RESHARDS``).

    Raises:
        ConfigError: the file is not such a record, naming it.
    """
    path = settings.home / PENDING_RESHARDS
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return {
            str(name): {k: [str(key) for key in r[k]] for k in ("from", "to", "dropped")}
            for name, r in raw.items()
        }
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigError(
            f"{path}: not a record of re-shards under way ({exc}); delete it, and the next "
            "`corpus sync` finds a re-shard from the partitions alone"
        ) from exc


def _write_pending_reshards(settings: Settings, pending: dict[str, dict[str, list[str]]]) -> None:
    path = settings.home / PENDING_RESHARDS
    if not pending:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(pending, sort_keys=True, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def _collection_of(key: str) -> str:
    try:
        return split_key(key).collection
    except ValueError:  # not a key this code wrote: treated as a collection of its own
        return key


def _latest(instance: dg.DagsterInstance, asset: str, partition: str) -> dg.EventLogRecord | None:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]),
        limit=1,
    ).records
    return records[0] if records else None


def partition_is_current(instance: dg.DagsterInstance, home: Home, part: CollectionConfig) -> bool:
    """Whether a shard's last runs saw what is there now: its files fingerprint as its last
    ``source_manifest`` recorded, the configuration is older than that scan, no source of it
    was withdrawn since, its warehouse files are there, and every profile's ``index_rows`` of
    the shard was materialized after it, into the profile's live generation, whose table is
    there and is the one it wrote (not one made again since)."""
    config = home.config
    ingest = _latest(instance, "source_manifest", part.partition)
    if ingest is None or ingest.asset_materialization is None:
        return False
    seen = ingest.asset_materialization.metadata.get("fingerprint")
    if str(getattr(seen, "value", "")) != fingerprint(part, rule=config_input_rule(config)):
        return False
    if config.path.is_file() and config.path.stat().st_mtime >= ingest.timestamp:
        return False
    if withdrawals_pending(home, part.partition):
        return False
    # a partition whose files went (``corpus doctor --repair`` removes damaged ones) is rebuilt
    files = [("source_manifest",), ("parsed_blocks",), ("embedding_inputs",)]
    files += [("embeddings", p) for p in config.profiles if config.profile_covers(p, part.name)]
    if not all(home.warehouse.path(*f, part.partition).is_file() for f in files):
        return False
    for profile in config.profiles:
        if not config.profile_covers(profile, part.name):
            continue
        key = dg.MultiPartitionKey({"profile": profile, "collection": part.partition})
        rows = _latest(instance, "index_rows", str(key))
        if rows is None or rows.timestamp < ingest.timestamp or rows.asset_materialization is None:
            return False
        # written into the profile's live generation (not one retired since, whose successor
        # has none of the shard's rows yet)
        live = home.registry.live_generation(profile)
        written = rows.asset_materialization.metadata.get("generation")
        if live is None or str(getattr(written, "value", "")) != live.id:
            return False
        # a table dropped since (``corpus doctor --repair`` drops a damaged one) is rebuilt
        # under the same generation id, and holds none of the shard's rows until it runs;
        # nor does it once a rebuild cut short made it anew without reaching this shard: the
        # shard's write recorded the id of the table it went to, which the new one has not
        # (a table of an older home has none, and writes into it recorded none)
        if not home.store.exists(live):
            return False
        made = rows.asset_materialization.metadata.get("table_created")
        if str(getattr(made, "value", "")) != home.store.created(live):
            return False
    return True


def run_sync(
    defs: dg.Definitions,
    config: CorpusConfig,
    instance: dg.DagsterInstance,
    *,
    progress: Progress | None = None,
    only: Sequence[str] | None = None,
    settings: Settings | None = None,
    retry_refused: bool = False,
) -> SyncReport:
    """Ingest every collection (or those of ``only``), embed and index it under every profile,
    refresh each generation. With ``retry_refused``, the inputs the embedders' servers refused
    before are sent again (``EmbeddingsConfig``); otherwise they are held back unasked.

    A sharded collection runs shard by shard, and a shard whose files and configuration are
    as its last run saw them is left alone (``skipped_partitions``). A collection whose shard
    count changed is re-sharded: its new partitions are built (vectors from the embedding
    cache), each generation refreshed, and only then are its old partitions dropped.
    """
    say = progress or (lambda _msg: None)
    if settings is None:
        settings = defs.resources["corpus"].settings()
    home = Home(settings, config)
    names = [n for n in config.collections if only is None or n in only]
    report = SyncReport()
    report.orphaned_runs = fail_orphaned_runs(instance)
    for run_id in report.orphaned_runs:
        say(f"run {run_id[:8]} failed: the process that executed it ended before it did")
    changed = {n: r for n, r in reshards(instance, config).items() if n in names}
    # a re-shard a sync cut short began, whose keys are all there now (3 -> 4): still one
    # (any key it was to drop is gone, or the partitions would have told it)
    pending = pending_reshards(settings)
    for name, r in pending.items():
        to = list(config.collections[name].partitions) if name in config.collections else []
        if name in names and name not in changed and r["to"] == to:
            changed[name] = Reshard(old=r["from"], dropped=[])
    pending = {n: r for n, r in pending.items() if n not in names}
    pending |= {
        n: {"from": r.old, "to": list(config.collections[n].partitions), "dropped": r.dropped}
        for n, r in changed.items()
    }
    _write_pending_reshards(settings, pending)
    replaced = {n: r.dropped for n, r in changed.items() if r.dropped}
    for name, r in changed.items():
        new = list(config.collections[name].partitions)
        report.reshards[name] = {"from": r.old, "to": new, "dropped": r.dropped}
        then = f", then dropping {', '.join(r.dropped)}" if r.dropped else ""
        say(
            f"re-shard {name}: {len(r.old)} -> {len(new)} partitions; building "
            f"{', '.join(new)} from the embedding cache{then}"
        )
    ensure_collection_partitions(instance, config)
    purge_removed_collections(defs, config, instance, report)

    embed_config: dict[str, Any] = (
        {"ops": {"embeddings": {"config": {"retry_refused": True}}}} if retry_refused else {}
    )

    def execute(job: str, key: str | dg.MultiPartitionKey, label: str) -> dg.ExecuteInProcessResult:
        say(f"{job} {label}")
        result = defs.resolve_job_def(job).execute_in_process(
            tags=process_tags(),
            partition_key=key,
            instance=instance,
            raise_on_error=False,
            run_config={**QUIET_RUN_CONFIG, **(embed_config if job == "embed_job" else {})},
        )
        record_run(report, job, label, result)
        return result

    parts: list[CollectionConfig] = []
    with one_listing():  # each sharded collection's folder listed once, not once a shard
        for name in names:
            c = config.collections[name]
            for part in c.parts:
                current = c.shards > 1 and name not in changed
                if current and partition_is_current(instance, home, part):
                    report.skipped_partitions.append(part.partition)
                else:
                    parts.append(part)

    for name in names:
        report.collections[name] = {"profiles": {}, **dict.fromkeys(_COUNTS, 0)}
        report.collections[name]["deletion_receipt"] = None
    ingested: set[str] = set()
    for part in parts:
        entry = report.collections[part.name]
        result = execute("ingest_job", part.partition, part.partition)
        if result.success:
            ingested.add(part.partition)
        mats = materializations(result)
        manifest = mats.get("source_manifest", {})
        blocks = mats.get("parsed_blocks", {})
        counts = {
            "documents": manifest.get("documents", 0),
            "added": manifest.get("added", 0),
            "changed": manifest.get("changed", 0),
            "removed": manifest.get("removed", 0),
            "held": manifest.get("held", 0),
            "blocks": blocks.get("blocks", 0),
            "quarantined": blocks.get("quarantined", 0),
        }
        for k, v in counts.items():
            entry[k] += int(v)
        entry["deletion_receipt"] = manifest.get("deletion_receipt") or entry["deletion_receipt"]
        report.newly_quarantined.extend(blocks.get("new_quarantine") or [])
        report.notes.extend(blocks.get("notes") or [])
    for name, keys in replaced.items():
        # every new partition scanned: what the dropped ones list and none of them does
        # went during the re-shard, and is deleted now, before the rows are written
        if set(config.collections[name].partitions) <= ingested:
            entry = report.collections[name]
            for receipt in delete_unlisted(home, name, keys):
                entry["removed"] += len(receipt.source_ids)
                entry["deletion_receipt"] = receipt.path
    for name, entry in report.collections.items():
        if config.collections[name].shards > 1:
            entry["partitions_run"] = [p.partition for p in parts if p.name == name]
            entry["documents"] = sum(
                _documents(instance, key) for key in config.collections[name].partitions
            )
        report.documents += int(entry["documents"])
        report.quarantined += int(entry["quarantined"])

    for profile in config.profiles:
        for part in parts:
            if not config.profile_covers(profile, part.name):
                continue
            key = dg.MultiPartitionKey({"profile": profile, "collection": part.partition})
            mats = materializations(execute("embed_job", key, f"{profile}/{part.partition}"))
            emb = mats.get("embeddings", {})
            rows = mats.get("index_rows", {})
            report.embedded += int(emb.get("embedded", 0))
            report.cache_hits += int(emb.get("cache_hits", 0))
            report.refused_inputs += int(emb.get("refused_inputs", 0))
            report.refused.extend({"profile": profile, **r} for r in emb.get("refused") or [])
            mine = report.collections[part.name]["profiles"].setdefault(
                profile,
                {"embedded": 0, "cache_hits": 0, "refused_inputs": 0, "rows": 0, "generation": ""},
            )
            mine["embedded"] += int(emb.get("embedded", 0))
            mine["refused_inputs"] += int(emb.get("refused_inputs", 0))
            mine["cache_hits"] += int(emb.get("cache_hits", 0))
            mine["rows"] = rows.get("collection_rows", 0)  # the collection's, every shard
            mine["generation"] = rows.get("generation", "")
        gen = materializations(execute("generation_job", profile, profile)).get(
            "index_generation", {}
        )
        report.generations[profile] = {
            "generation": gen.get("generation", ""),
            "status": gen.get("status", ""),
            "rows": gen.get("rows", 0),
        }
    if replaced and report.ok:  # the new partitions serve: the old ones go
        drop_replaced(home, instance, replaced, say)
    if changed and report.ok:
        _write_pending_reshards(settings, {n: r for n, r in pending.items() if n not in changed})
    return report


# "held": records missing from a file that cannot be read whole, kept as they were
_COUNTS = ("documents", "added", "changed", "removed", "held", "blocks", "quarantined")


def _documents(instance: dg.DagsterInstance, partition: str) -> int:
    """The document count the partition's latest ``source_manifest`` recorded."""
    record = _latest(instance, "source_manifest", partition)
    if record is None or record.asset_materialization is None:
        return 0
    value = record.asset_materialization.metadata.get("documents")
    return int(getattr(value, "value", 0) or 0)


def drop_replaced(
    home: Home, instance: dg.DagsterInstance, replaced: dict[str, list[str]], say: Progress
) -> None:
    """Remove the partitions a re-shard replaced: their warehouse files, then the partitions."""
    for name, keys in replaced.items():
        for key in keys:
            removed = drop_partition(home, key)
            instance.delete_dynamic_partition("collections", key)
            say(f"re-shard {name}: dropped partition {key} ({len(removed)} files)")
