"""``corpus sync``: run the asset graph for every configured collection, in this process,
against the home's Dagster instance, so the runs show in the UI like any other."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from corpus_index.config import CorpusConfig

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
    # documents that stopped parsing and serve their last good version (the registry's record)
    stale: list[dict[str, Any]] = field(default_factory=list)
    # documents this sync quarantined: source_id, source_version, path, line, error
    newly_quarantined: list[dict[str, Any]] = field(default_factory=list)

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
            "stale": self.stale,
            "newly_quarantined": self.newly_quarantined,
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
    """Names (``asset:check``) of the checks that failed in a run."""
    failed = []
    for ev in result.get_asset_check_evaluations():
        if not ev.passed:
            failed.append(f"{ev.asset_key.to_user_string()}:{ev.check_name}")
    return failed


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
        instance=instance, raise_on_error=False, run_config=QUIET_RUN_CONFIG
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


def ensure_collection_partitions(instance: dg.DagsterInstance, config: CorpusConfig) -> list[str]:
    """Add a dynamic partition for every configured collection; returns the ones added."""
    existing = set(instance.get_dynamic_partitions("collections"))
    missing = [name for name in config.collections if name not in existing]
    if missing:
        instance.add_dynamic_partitions("collections", missing)
    return missing


def purge_removed_collections(
    defs: dg.Definitions, config: CorpusConfig, instance: dg.DagsterInstance, report: SyncReport
) -> None:
    """Collections whose partition exists but that left the config: purged through
    ``purge_collection_job`` (so the UI shows it), then their partition removed."""
    gone = sorted(set(instance.get_dynamic_partitions("collections")) - set(config.collections))
    for name in gone:
        result = defs.resolve_job_def("purge_collection_job").execute_in_process(
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
        instance.delete_dynamic_partition("collections", name)
        report.purged_collections.append(name)


def run_sync(
    defs: dg.Definitions,
    config: CorpusConfig,
    instance: dg.DagsterInstance,
    *,
    progress: Progress | None = None,
    only: Sequence[str] | None = None,
) -> SyncReport:
    """Ingest every collection (or those of ``only``), embed and index it under every profile,
    refresh each generation."""
    say = progress or (lambda _msg: None)
    names = [n for n in config.collections if only is None or n in only]
    report = SyncReport()
    ensure_collection_partitions(instance, config)
    purge_removed_collections(defs, config, instance, report)

    def execute(job: str, key: str | dg.MultiPartitionKey, label: str) -> dg.ExecuteInProcessResult:
        say(f"{job} {label}")
        result = defs.resolve_job_def(job).execute_in_process(
            partition_key=key, instance=instance, raise_on_error=False, run_config=QUIET_RUN_CONFIG
        )
        record_run(report, job, label, result)
        return result

    for name in names:
        entry: dict[str, Any] = {"profiles": {}}
        mats = materializations(execute("ingest_job", name, name))
        manifest = mats.get("source_manifest", {})
        blocks = mats.get("parsed_blocks", {})
        entry.update(
            documents=manifest.get("documents", 0),
            added=manifest.get("added", 0),
            changed=manifest.get("changed", 0),
            removed=manifest.get("removed", 0),
            deletion_receipt=manifest.get("deletion_receipt") or None,
            blocks=blocks.get("blocks", 0),
            quarantined=blocks.get("quarantined", 0),
        )
        report.documents += int(entry["documents"])
        report.quarantined += int(entry["quarantined"])
        report.newly_quarantined.extend(blocks.get("new_quarantine") or [])
        report.collections[name] = entry

    for profile in config.profiles:
        for name in names:
            if not config.profile_covers(profile, name):
                continue
            key = dg.MultiPartitionKey({"profile": profile, "collection": name})
            mats = materializations(execute("embed_job", key, f"{profile}/{name}"))
            emb = mats.get("embeddings", {})
            rows = mats.get("index_rows", {})
            report.embedded += int(emb.get("embedded", 0))
            report.cache_hits += int(emb.get("cache_hits", 0))
            report.collections[name]["profiles"][profile] = {
                "embedded": emb.get("embedded", 0),
                "cache_hits": emb.get("cache_hits", 0),
                "rows": rows.get("collection_rows", 0),
                "generation": rows.get("generation", ""),
            }
        gen = materializations(execute("generation_job", profile, profile)).get(
            "index_generation", {}
        )
        report.generations[profile] = {
            "generation": gen.get("generation", ""),
            "status": gen.get("status", ""),
            "rows": gen.get("rows", 0),
        }
    return report
