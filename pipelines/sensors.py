"""``source_update_sensor``: watch every collection root and request the runs that keep the
index true to its sources.

Each tick fingerprints every configured collection (file names, sizes and mtimes: ``stat`` only)
and compares with the cursor. A changed collection gets an ``ingest_job`` run for its partition;
declarative automation carries the change downstream to every profile (the ACTIVE generation's
and any BUILDING one's). A collection new in the config gets its dynamic partition; one that
left the config is purged from every store and its partition removed. Run keys are the
fingerprints, so the same state never runs twice, and the cursor is plain JSON.
"""

import json
import os
from dataclasses import dataclass, field

import dagster as dg

from assets import CorpusResource
from corpus_index.config import CorpusConfig
from corpus_index.parsing import fingerprint

DEFAULT_INTERVAL_S = 30


def sensor_interval() -> int:
    """Seconds between ticks: ``CORPUS_SENSOR_INTERVAL_S`` (default 30)."""
    return int(os.environ.get("CORPUS_SENSOR_INTERVAL_S") or DEFAULT_INTERVAL_S)


@dataclass
class SourceScan:
    """What one tick decided (kept apart from Dagster's types so it can be tested directly)."""

    ingest: dict[str, str] = field(default_factory=dict)  # collection -> fingerprint
    add_partitions: list[str] = field(default_factory=list)
    purge: list[str] = field(default_factory=list)
    cursor: dict[str, str] = field(default_factory=dict)


def scan_sources(config: CorpusConfig, cursor: dict[str, str], partitions: list[str]) -> SourceScan:
    scan = SourceScan()
    existing = set(partitions)
    for name, collection in config.collections.items():
        fp = fingerprint(collection)
        scan.cursor[name] = fp
        if name not in existing:
            scan.add_partitions.append(name)
        if cursor.get(name) != fp or name not in existing:
            scan.ingest[name] = fp
    scan.purge = sorted(existing - set(config.collections))
    return scan


@dg.sensor(
    name="source_update_sensor",
    minimum_interval_seconds=sensor_interval(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    job_name="ingest_job",
    description="Ingest collections whose files changed; add and purge collection partitions.",
)
def source_update_sensor(
    context: dg.SensorEvaluationContext, corpus: CorpusResource
) -> dg.SensorResult:
    config = corpus.settings().load()
    cursor = json.loads(context.cursor) if context.cursor else {}
    partitions = list(context.instance.get_dynamic_partitions("collections"))
    scan = scan_sources(config, cursor, partitions)
    requests = [
        dg.RunRequest(
            run_key=f"ingest:{name}:{fp}",
            job_name="ingest_job",
            partition_key=name,
            tags={"corpus/trigger": "source_update_sensor"},
        )
        for name, fp in scan.ingest.items()
    ]
    requests += [
        dg.RunRequest(
            run_key=f"purge:{name}:{cursor.get(name, '')}",
            job_name="purge_collection_job",
            run_config={"ops": {"purge_collection_op": {"config": {"collection": name}}}},
            tags={"corpus/trigger": "source_update_sensor"},
        )
        for name in scan.purge
    ]
    dynamic: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
    if scan.add_partitions:
        dynamic.append(
            dg.AddDynamicPartitionsRequest("collections", partition_keys=scan.add_partitions)
        )
    if scan.purge:
        dynamic.append(dg.DeleteDynamicPartitionsRequest("collections", partition_keys=scan.purge))
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=dynamic,
        cursor=json.dumps(scan.cursor, sort_keys=True),
    )


automation_sensor = dg.AutomationConditionSensorDefinition(
    "corpus_automation_sensor",
    target=dg.AssetSelection.all(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=sensor_interval(),
    description="Carries source changes from ingestion to every profile's partitions.",
)
