"""``source_update_sensor``: watch every collection root and request the runs that keep the
index true to its sources.

Each tick fingerprints every configured collection (file names, sizes and mtimes: ``stat`` only)
and compares with the cursor. A changed collection gets an ``ingest_job`` run for its partition
(one whose root is missing or cannot be listed is left out, no run asked, with a warning and
the tick's skip reason naming it);
declarative automation carries the change downstream to every profile (the ACTIVE generation's
and any BUILDING one's). A collection that changes again while an ingest run of it waits to
start asks for no run more: that run reads the files as they are when it starts. A
collection new in the config gets its dynamic partition; one that
left the config is purged from every store, and the purge run removes its partition once it
succeeded (a failed purge is asked again, as a failed ingest is).

The cursor is plain JSON: ``{"fingerprints": {collection: fingerprint}, "changes": {collection:
n}}``, ``n`` counting the changes seen in that collection. A run key is
``ingest:<collection>:<n>:<fingerprint>``: the same cursor and the same files give the same key
(so a repeated tick never runs twice), while a folder that returns to an earlier state (a file
added, then deleted) is a new change with a new key; the daemon skips a run key it has seen.
A cursor that is not of this form (set by hand in the UI) is read as none, with a warning; a
collection the cursor has no count for counts on from the run keys of the sensor's runs of it
(:func:`asked_keys`), so a key is never one of before.

The cursor takes a fingerprint when its run is asked for, not when the run succeeds: a run
that failed (its worker killed, a transient error) is asked again under a new run key, while
the collection's last ingest has not recorded it and no run of it is in flight; a purge that
failed likewise, while the partition is there. After ``MAX_TRIES`` failures in a row the
sensor goes on asking, but only once a wait has passed since the last one failed
(``RETRY_BACKOFF_S``, doubling with each further failure up to ``MAX_BACKOFF_S``), so a run
that fails for good does not run every tick, and one that failed for a while (a store down
for an hour) still ends a deleted source's serving once it can. While it waits it says so: a
warning in the tick's log, the tick's skip reason when it asks for nothing else, the
partition under ``retrying`` in the cursor, and an alert in the home's alerts
(``corpus alerts``) for each run that failed past ``MAX_TRIES``.
"""

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import dagster as dg

from assets import CorpusResource
from corpus_index.alerts import Alert, record_alert
from corpus_index.config import CorpusConfig
from corpus_index.embedding import config_input_rule
from corpus_index.identity_store import source_fingerprint
from corpus_index.kinds import MISSING, UNREADABLE, fingerprint
from corpus_index.shards import split_key
from pipelines.orphans import IN_FLIGHT as IN_FLIGHT_STATUSES

DEFAULT_INTERVAL_S = 30
# runs asked for one state of a collection's files (or one purge) that fail in a row before
# the sensor waits between asks (a run failing for good would otherwise run again every
# tick): RETRY_BACKOFF_S after the last failure, doubled with each failure past MAX_TRIES, up
# to MAX_BACKOFF_S; a change of its files starts over
MAX_TRIES = 3
RETRY_BACKOFF_S = 300.0
MAX_BACKOFF_S = 3600.0
# runs read back to count the failures in a row: enough for the wait to reach its bound
LOOKBACK = MAX_TRIES + 8
# the tag naming the fingerprint an ingest run was asked for, so a failed one is asked again
FINGERPRINT_TAG = "corpus/fingerprint"
# the tag naming the partition a purge run was asked for
PURGE_TAG = "corpus/purge"
# the tags the daemon gives a run a sensor asked for: the sensor's name and the run key, by
# which it skips a run key it has seen before
SENSOR_NAME = "source_update_sensor"
SENSOR_NAME_TAG = "dagster/sensor_name"
RUN_KEY_TAG = "dagster/run_key"
# a run in these states has not begun its steps: it reads the files as they are when it does
NOT_STARTED = [
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.STARTING,
]
# what a run of those asked for came to (see :func:`recent_runs`)
IN_FLIGHT, SUCCEEDED, FAILED = "in flight", "succeeded", "failed"
# the tag Dagster gives a run of a profile x collection partition, naming its collection part
# (the run queue allows one such run per value; an ingest run has no such tag)
COLLECTION_TAG = "dagster/partition/collection"
UNFINISHED = [dg.DagsterRunStatus.QUEUED, *IN_FLIGHT_STATUSES]


def sensor_interval() -> int:
    """Seconds between ticks: ``CORPUS_SENSOR_INTERVAL_S`` (default 30)."""
    return int(os.environ.get("CORPUS_SENSOR_INTERVAL_S") or DEFAULT_INTERVAL_S)


class RunOutcome(NamedTuple):
    """What one run asked for came to: ``IN_FLIGHT``, ``SUCCEEDED`` or ``FAILED``, with its
    id and when it finished (unix seconds; None while in flight)."""

    status: str
    run_id: str = ""
    ended: float | None = None


@dataclass(frozen=True, slots=True)
class Retrying:
    """A partition whose runs of ``job`` failed ``failures`` times in a row: asked again at
    ``next_try`` (unix seconds), not before."""

    partition: str
    job: str
    failures: int
    last_run_id: str
    next_try: float

    def message(self) -> str:
        at = datetime.fromtimestamp(self.next_try, UTC).isoformat(timespec="seconds")
        what = "purge" if self.job == "purge_collection_job" else "ingest"
        return (
            f"{self.job} ({what}) of {self.partition} failed {self.failures} runs in a row "
            f"(the last: run {self.last_run_id[:8]}): asked again at {at}, and after a wait "
            f"doubling up to {MAX_BACKOFF_S:g} s while it fails; until then "
            + (
                "the removed collection's rows are still in every generation"
                if what == "purge"
                else "its files' changes (deletions included) are not in the index"
            )
        )


@dataclass
class SourceScan:
    """What one tick decided (kept apart from Dagster's types so it can be tested directly)."""

    ingest: dict[str, str] = field(default_factory=dict)  # collection -> run key
    # collection -> why its ingest waits (a run of its profile partitions is in flight)
    deferred: dict[str, str] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)  # collection -> fingerprint
    add_partitions: list[str] = field(default_factory=list)
    purge: dict[str, str] = field(default_factory=dict)  # collection -> run key
    # collection -> why, naming its root: missing, or it cannot be listed
    unreadable: dict[str, str] = field(default_factory=dict)
    retrying: dict[str, Retrying] = field(default_factory=dict)  # partition -> its wait
    # partition changed while an ingest run of it waits to start -> that run's id
    queued: dict[str, str] = field(default_factory=dict)
    cursor: dict[str, dict[str, object]] = field(default_factory=dict)


def read_cursor(raw: str | None) -> tuple[dict[str, str], dict[str, int]]:
    """Fingerprints and change counts from a cursor (a flat ``{collection: fingerprint}``, the
    earlier format, reads as counts of zero).

    Raises:
        ValueError: the cursor is not one this sensor writes (set by hand in the UI's "Set
            cursor value", or damaged), saying what is wrong with it.
    """
    try:
        data = json.loads(raw) if raw else {}
    except json.JSONDecodeError as e:
        raise ValueError(f"the cursor is not JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"the cursor is a JSON {type(data).__name__}, not an object")
    fingerprints, changes = (data, {})
    if "fingerprints" in data:
        fingerprints, changes = data["fingerprints"], data.get("changes", {})
    if not isinstance(fingerprints, dict) or not all(
        isinstance(v, str) for v in fingerprints.values()
    ):
        raise ValueError("the cursor's fingerprints are not an object of collection -> text")
    if not isinstance(changes, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in changes.values()
    ):
        raise ValueError("the cursor's changes are not an object of collection -> count")
    return dict(fingerprints), dict(changes)


def scan_sources(
    config: CorpusConfig,
    fingerprints: dict[str, str],
    partitions: list[str],
    changes: dict[str, int] | None = None,
    ingested: Callable[[str], str] | None = None,
    home: Path | None = None,
    runs: Callable[[str, dict[str, str]], list[RunOutcome]] | None = None,
    now: float | None = None,
    asked: Callable[[str], str] | None = None,
    queued: Callable[[str], str] | None = None,
    writing: Callable[[str], str] | None = None,
) -> SourceScan:
    """What to ingest, add and purge, given the cursor's ``fingerprints`` and the instance's
    collection ``partitions``.

    ``ingested(collection)`` is the fingerprint the collection's last ingest recorded (``''``
    if none): a collection whose files are as that ingest saw them is not ingested again,
    whatever the cursor says (a `corpus sync` ran while no daemon watched; the first tick
    of a new daemon), unless its partition is new. With ``home`` (the home folder), what a
    sync reads there for a collection counts too (merges recorded for its tenant).

    ``runs(job, tags)`` tells what the latest runs of ``job`` with ``tags`` came to, newest
    first (:func:`recent_runs`): a collection the cursor has seen as it is, but whose last
    ingest did not record it, is asked again, under a new run key, when the run asked for
    it failed and none is in flight. The partition of a collection that left the config is
    purged while it is there (the purge run removes it once the data is gone), unless a purge
    of it is in flight. Past ``MAX_TRIES`` failures in a row either is asked again only once
    its wait since the last failure is over (:func:`next_try`), at ``now`` (default: the
    clock's); until then it is under ``retrying``.

    ``asked(partition)`` is the run key of highest change count among this sensor's latest
    runs of the partition (:func:`asked_keys`): a partition the cursor has no count for (no
    cursor, one cleared or damaged, or of the earlier flat format) counts on from it, so a
    key is never one the daemon has seen, which it would skip (with the files back to a
    state of before, a file added then removed, its rows would stay in the index); the
    same state asked again (a tick the daemon evaluates again) gives that key again.

    ``queued(partition)`` is the id of an ``ingest_job`` run of the partition that has not
    started yet (``''`` if none, :func:`queued_ingest`): a collection changed while one waits
    asks for no run more, since that one reads its files as they are when it starts; it is
    under ``queued``, and the cursor keeps its fingerprint of before.

    ``writing(partition)`` names a run of the partition's profile partitions (embeddings,
    sidecars, index rows) that is queued or in flight (``''`` if none,
    :func:`collection_runs_in_flight`): the partition's ingest waits for it, under
    ``deferred``, its change left out of the cursor, so the two runs never write the
    collection by turns (an ingest between that run's embeddings and its index rows would
    give it other inputs than it embedded); the run queue cannot keep them apart, as an
    ingest run and a profile run name their collection in different tags.
    """
    now = time.time() if now is None else now
    scan = SourceScan()
    counts = dict(changes or {})
    existing = set(partitions)
    seen: dict[str, str] = {}
    # every partition on its own: a sharded collection's shards are fingerprinted and
    # ingested apart, so a change to one document ingests its shard
    parts = [part for c in config.collections.values() for part in c.parts]
    # editing the section registry or a profile's input format changes every collection's
    # inputs: it is part of each one's fingerprint, as of the one its ingest records
    rule = config_input_rule(config)
    for collection in parts:
        name = collection.partition
        fp = (
            fingerprint(collection, rule=rule)
            if home is None
            else source_fingerprint(home, collection, rule=rule)
        )
        seen[name] = fp
        if name not in existing:
            scan.add_partitions.append(name)
        if fp.startswith(UNREADABLE) or fp == MISSING:
            # its ingest could only fail (a root gone is most often a mount not there yet,
            # not a collection emptied); the others go on, and it is compared as usual once
            # it can be listed again
            scan.unreadable[name] = _unlisted(collection.path, name, fp)
            continue
        # a new partition is always ingested: a collection purged and configured again has a
        # last ingest on record, of data that is gone
        seen_before = fingerprints.get(name) == fp or bool(ingested and ingested(name) == fp)
        # the cursor took the fingerprint when the run was asked for, not when it succeeded
        failed = False
        if seen_before and runs is not None and ingested is not None and ingested(name) != fp:
            tried = runs("ingest_job", ingest_tags(name, fp))
            failed = _due(scan, name, "ingest_job", tried, now)
        asks = name not in existing or not seen_before or failed
        # an ingest run of it that has not started reads the files as they are when it
        # starts: a run more would ingest the same state again (a copy of many files over
        # several ticks asked for a run each tick)
        pending = queued(name) if queued and name in existing and not seen_before else ""
        busy = writing(name) if asks and not pending and writing is not None else ""
        if pending:
            scan.queued[name] = pending
        elif busy:
            scan.deferred[name] = (
                f"ingest of {name} waits for run {busy[:8]}, which writes its profile "
                "partitions, to end"
            )
        elif asks:
            scan.ingest[name] = _run_key("ingest", name, fp, counts, asked)
        if pending or busy:
            # the cursor keeps what it had, so the change is compared again next tick (the
            # run waited on may be canceled, or fail)
            if name in fingerprints:
                seen[name] = fingerprints[name]
            else:
                del seen[name]
    # a partition of a collection still configured under another shard count is left to
    # `corpus sync`, which re-shards it (builds the new shards first, then drops it)
    wanted = {part.partition for part in parts}
    for name in sorted(existing - wanted):
        if split_key(name).collection in config.collections:
            continue
        tried = runs("purge_collection_job", {PURGE_TAG: name}) if runs else []
        waits = tried and not _due(scan, name, "purge_collection_job", tried, now)
        if waits and tried[0].status != SUCCEEDED:
            continue  # in flight, or waiting to be asked again
        scan.purge[name] = _run_key("purge", name, fingerprints.get(name, ""), counts, asked)
    scan.fingerprints = seen
    scan.cursor = {"fingerprints": seen, "changes": dict(sorted(counts.items()))}
    if scan.retrying:
        scan.cursor["retrying"] = {
            name: {
                "job": r.job,
                "failures": r.failures,
                "next_try": datetime.fromtimestamp(r.next_try, UTC).isoformat(timespec="seconds"),
            }
            for name, r in sorted(scan.retrying.items())
        }
    return scan


def _run_key(
    kind: str, name: str, fp: str, counts: dict[str, int], asked: Callable[[str], str] | None
) -> str:
    """The run key of a ``kind`` run (``ingest``, ``purge``) for ``name`` as ``fp``, counting
    one more change in ``counts``; a name the cursor has no count for counts on from the
    key ``asked`` gives, or is that key when it was asked for this same state."""
    if name not in counts and asked is not None:
        last = asked(name)
        counts[name] = _key_count(last, name)
        if last == f"{kind}:{name}:{counts[name]}:{fp}":
            return last
    counts[name] = counts.get(name, 0) + 1
    return f"{kind}:{name}:{counts[name]}:{fp}"


def _unlisted(root: Path, name: str, fp: str) -> str:
    """Why the collection ``name`` at ``root``, fingerprinted ``fp`` (missing or unreadable),
    is not ingested this tick, naming its root."""
    if fp == MISSING:
        return (
            f"{root} does not exist or is not a folder: collection {name} is not ingested "
            "(its rows are kept) until it is there again"
        )
    errno = fp.removeprefix(UNREADABLE)
    why = os.strerror(int(errno)) if errno.isdigit() else "unknown error"
    return (
        f"{root} (or a folder in it) cannot be listed ({why}): "
        f"collection {name} is not ingested until it can be"
    )


def _due(scan: SourceScan, name: str, job: str, tried: list[RunOutcome], now: float) -> bool:
    """Whether the runs of ``job`` for ``name`` that came to ``tried`` (newest first) are to
    be asked again now; one waiting for its time is put under ``scan.retrying``."""
    at = next_try(tried)
    if at is None:
        return False
    if at > now:
        failures = failures_in_a_row(tried)
        scan.retrying[name] = Retrying(name, job, failures, tried[0].run_id, at)
        return False
    return True


def failures_in_a_row(outcomes: list[RunOutcome]) -> int:
    """How many of ``outcomes`` (newest first) failed before the newest that did not."""
    return next((i for i, o in enumerate(outcomes) if o.status != FAILED), len(outcomes))


def ingest_tags(partition: str, fp: str) -> dict[str, str]:
    """The tags that find the ``ingest_job`` runs asked for ``partition`` as ``fp``."""
    return {"dagster/partition": partition, FINGERPRINT_TAG: fp}


def next_try(outcomes: list[RunOutcome]) -> float | None:
    """When runs that came to ``outcomes`` (newest first) are to be asked again (unix
    seconds; 0: at once), or None when not (none ran, the newest is in flight or succeeded).
    Fewer than ``MAX_TRIES`` failures in a row are asked again at once; each one past them
    doubles the wait after the newest, from ``RETRY_BACKOFF_S`` up to ``MAX_BACKOFF_S``."""
    if not outcomes or outcomes[0].status != FAILED:
        return None
    failures = failures_in_a_row(outcomes)
    if failures < MAX_TRIES:
        return 0.0
    wait = min(MAX_BACKOFF_S, RETRY_BACKOFF_S * 2.0 ** (failures - MAX_TRIES))
    return (outcomes[0].ended or 0.0) + wait


def recent_runs(
    instance: dg.DagsterInstance,
) -> Callable[[str, dict[str, str]], list[RunOutcome]]:
    """What the latest ``LOOKBACK`` runs of a job with some tags came to in ``instance``,
    newest first: ``IN_FLIGHT`` (queued, starting, running), ``SUCCEEDED`` or ``FAILED``
    (canceled too), with each one's id and end."""

    def runs(job: str, tags: dict[str, str]) -> list[RunOutcome]:
        records = instance.get_run_records(dg.RunsFilter(job_name=job, tags=tags), limit=LOOKBACK)
        return [
            RunOutcome(
                IN_FLIGHT
                if not r.dagster_run.is_finished
                else SUCCEEDED
                if r.dagster_run.is_success
                else FAILED,
                r.dagster_run.run_id,
                r.end_time or r.update_timestamp.timestamp(),
            )
            for r in records
        ]

    return runs


def asked_keys(instance: dg.DagsterInstance) -> Callable[[str], str]:
    """The run key of highest change count among the latest ingest and purge runs this
    sensor asked for a partition (``''`` when none), read from ``instance``."""

    def asked(partition: str) -> str:
        keys = [""]
        for job, tags in (
            ("ingest_job", {"dagster/partition": partition}),
            ("purge_collection_job", {PURGE_TAG: partition}),
        ):
            records = instance.get_run_records(
                dg.RunsFilter(job_name=job, tags={**tags, SENSOR_NAME_TAG: SENSOR_NAME}),
                limit=1,
            )
            keys += [r.dagster_run.tags.get(RUN_KEY_TAG, "") for r in records]
        return max(keys, key=lambda key: _key_count(key, partition))

    return asked


def _key_count(key: str, partition: str) -> int:
    """The change count of a run key (``ingest:<partition>:<n>:...``, ``purge:...``); 0 for a
    key of another form."""
    for kind in ("ingest", "purge"):
        prefix = f"{kind}:{partition}:"
        if key.startswith(prefix):
            n = key.removeprefix(prefix).split(":", 1)[0]
            return int(n) if n.isdigit() else 0
    return 0


def _first_run_id(instance: dg.DagsterInstance, runs: dg.RunsFilter) -> str:
    """The id of the newest run of ``instance`` that ``runs`` matches (``''`` if none)."""
    records = instance.get_run_records(runs, limit=1)
    return records[0].dagster_run.run_id if records else ""


def queued_ingest(instance: dg.DagsterInstance) -> Callable[[str], str]:
    """The id of an ``ingest_job`` run of a partition that has not started (queued, not yet
    submitted, its worker starting), ``''`` if none, read from ``instance``."""
    return lambda partition: _first_run_id(
        instance,
        dg.RunsFilter(
            job_name="ingest_job", tags={"dagster/partition": partition}, statuses=NOT_STARTED
        ),
    )


def collection_runs_in_flight(instance: dg.DagsterInstance) -> Callable[[str], str]:
    """The id of a run of a collection partition's profile partitions that is queued or in
    flight in ``instance`` (``''`` if none)."""
    return lambda partition: _first_run_id(
        instance, dg.RunsFilter(tags={COLLECTION_TAG: partition}, statuses=UNFINISHED)
    )


def last_ingested(instance: dg.DagsterInstance) -> Callable[[str], str]:
    """The fingerprint the latest ``source_manifest`` materialization of a collection
    recorded (``''`` if none), read from ``instance``."""

    def ingested(collection: str) -> str:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=dg.AssetKey("source_manifest"), asset_partitions=[collection]
            ),
            limit=1,
        ).records
        if not records:
            return ""
        value = records[0].asset_materialization.metadata.get("fingerprint")  # type: ignore[union-attr]
        return str(getattr(value, "value", "") or "")

    return ingested


@dg.sensor(
    name=SENSOR_NAME,
    minimum_interval_seconds=sensor_interval(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    job_name="ingest_job",
    description="Ingest collections whose files changed; add and purge collection partitions.",
)
def source_update_sensor(
    context: dg.SensorEvaluationContext, corpus: CorpusResource
) -> dg.SensorResult:
    settings = corpus.settings()
    config = settings.load()
    try:
        fingerprints, changes = read_cursor(context.cursor)
    except ValueError as e:
        # a tick that fails on its cursor fails forever: read it as none instead (the last
        # ingests' fingerprints keep an unchanged collection from being ingested again)
        context.log.warning(f"{e}: read as no cursor")
        fingerprints, changes = {}, {}
    partitions = list(context.instance.get_dynamic_partitions("collections"))
    scan = scan_sources(
        config,
        fingerprints,
        partitions,
        changes,
        ingested=last_ingested(context.instance),
        home=settings.home,
        runs=recent_runs(context.instance),
        asked=asked_keys(context.instance),
        queued=queued_ingest(context.instance),
        writing=collection_runs_in_flight(context.instance),
    )
    for why in scan.unreadable.values():
        context.log.warning(why)
    for name, run_id in scan.queued.items():
        context.log.info(
            f"{name} changed while ingest run {run_id[:8]} of it waits to start: "
            "that run reads the change, no run more is asked"
        )
    for why in scan.deferred.values():
        context.log.info(why)
    for waiting in scan.retrying.values():
        context.log.warning(waiting.message())
        _alert(settings.home, waiting)
    requests = [
        dg.RunRequest(
            run_key=key,
            job_name="ingest_job",
            partition_key=name,
            tags={
                "corpus/trigger": "source_update_sensor",
                FINGERPRINT_TAG: scan.fingerprints[name],
            },
        )
        for name, key in scan.ingest.items()
    ]
    requests += [
        dg.RunRequest(
            run_key=key,
            job_name="purge_collection_job",
            run_config={"ops": {"purge_collection_op": {"config": {"collection": name}}}},
            tags={"corpus/trigger": "source_update_sensor", PURGE_TAG: name},
        )
        for name, key in scan.purge.items()
    ]
    dynamic = []
    if scan.add_partitions:
        dynamic.append(
            dg.AddDynamicPartitionsRequest("collections", partition_keys=scan.add_partitions)
        )
    # a tick that asks for nothing says why where the UI lists ticks, not only in its log
    why = "; ".join(
        [
            *scan.unreadable.values(),
            *(r.message() for r in scan.retrying.values()),
            *scan.deferred.values(),
        ]
    )
    return dg.SensorResult(
        run_requests=requests,
        skip_reason=why if why and not requests else None,
        dynamic_partitions_requests=dynamic,
        cursor=json.dumps(scan.cursor, sort_keys=True),
    )


def _alert(home: Path, waiting: Retrying) -> None:
    """One alert per run that failed past ``MAX_TRIES`` (under that run's id and ``:retry``,
    so ``corpus alerts --ack`` of the run's prefix acknowledges it with the run's own)."""
    record_alert(
        home,
        Alert(
            run_id=f"{waiting.last_run_id}:retry",
            job="source_update_sensor",
            failed_at=datetime.now(UTC).isoformat(timespec="seconds"),
            partition=waiting.partition,
            failed_steps=(waiting.job,),
            error=waiting.message(),
        ),
    )


automation_sensor = dg.AutomationConditionSensorDefinition(
    "corpus_automation_sensor",
    target=dg.AssetSelection.all(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=sensor_interval(),
    description="Carries source changes from ingestion to every profile's partitions.",
)
