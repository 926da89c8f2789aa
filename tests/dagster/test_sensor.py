"""source_update_sensor on a real Dagster instance: partitions, run requests, cursor, purge."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from assets import CorpusResource
from corpus_index.alerts import alerts
from corpus_index.config import Settings
from corpus_index.home import Home
from definitions import build_definitions, dagster_runner
from pipelines.runner import DagsterRunner
from pipelines.runner import Home as RunnerHome
from pipelines.sensors import (
    MAX_BACKOFF_S,
    MAX_TRIES,
    PURGE_TAG,
    RETRY_BACKOFF_S,
    read_cursor,
    recent_runs,
    scan_sources,
    source_update_sensor,
)
from tests.corpusgen import write_home


@pytest.fixture
def instance(tmp_path: Path) -> dg.DagsterInstance:
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as inst:
        yield inst


def tick(settings: Settings, instance: dg.DagsterInstance, cursor: str | None) -> dg.SensorResult:
    resource = CorpusResource(config_path=str(settings.config_path), home=str(settings.home))
    # the resource has a lifecycle (a run holds the home's lock), so the context is opened
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"corpus": resource}
    ) as context:
        result = source_update_sensor(context)
    assert isinstance(result, dg.SensorResult)
    # apply the partition requests the way the daemon does
    for req in result.dynamic_partitions_requests or []:
        if isinstance(req, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        else:
            for key in req.partition_keys:
                instance.delete_dynamic_partition(req.partitions_def_name, key)
    return result


def keys(result: dg.SensorResult) -> list[tuple[str, str | None, str]]:
    return sorted(
        (r.job_name or "", r.partition_key, r.run_key or "") for r in result.run_requests or []
    )


def synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Settings, DagsterRunner, RunnerHome, dg.SensorResult]:
    """A home `corpus sync` built, its Dagster home, and the sensor's first tick on it (which
    asks for nothing: every collection is as the sync left it)."""
    settings = Settings(config_path=write_home(tmp_path), home=tmp_path / "home")
    monkeypatch.setenv("DAGSTER_HOME", str(settings.dagster_home))  # restored after the test
    runner = dagster_runner()
    assert runner.sync(settings).ok
    home = runner.open_home(settings)
    first = tick(settings, home.instance, None)
    assert keys(first) == []
    return settings, runner, home, first


def test_sensor_follows_the_sources(tmp_path: Path, instance: dg.DagsterInstance) -> None:
    config_path = write_home(tmp_path)
    settings = Settings(config_path=config_path, home=tmp_path / "home")

    first = tick(settings, instance, None)
    assert [(j, p) for j, p, _ in keys(first)] == [
        ("ingest_job", "alpha-deals"),
        ("ingest_job", "beta-deals"),
    ]
    assert sorted(instance.get_dynamic_partitions("collections")) == ["alpha-deals", "beta-deals"]
    cursor = first.cursor
    assert cursor is not None
    assert set(json.loads(cursor)["fingerprints"]) == {"alpha-deals", "beta-deals"}
    assert json.loads(cursor)["changes"] == {"alpha-deals": 1, "beta-deals": 1}

    # nothing changed: nothing requested, same cursor
    quiet = tick(settings, instance, cursor)
    assert keys(quiet) == [] and quiet.cursor == cursor

    # a changed file requests its collection only; the run key is the new state
    deal = tmp_path / "sources" / "beta" / "deal-beta-000.uw.md"
    deal.write_text(deal.read_text().replace("Rents grew", "Rents fell"))
    changed = tick(settings, instance, cursor)
    assert [(j, p) for j, p, _ in keys(changed)] == [("ingest_job", "beta-deals")]
    # deterministic: the same state asked twice gives the same run key (the daemon dedupes it)
    assert keys(tick(settings, instance, cursor)) == keys(changed)
    cursor = changed.cursor

    # an added and a removed file both change the fingerprint
    (tmp_path / "sources" / "alpha" / "new.uw.md").write_text(deal.read_text())
    added = tick(settings, instance, cursor)
    assert [p for _, p, _ in keys(added)] == ["alpha-deals"]
    cursor = added.cursor
    os.remove(tmp_path / "sources" / "alpha" / "new.uw.md")
    removed = tick(settings, instance, cursor)
    assert [p for _, p, _ in keys(removed)] == ["alpha-deals"]
    assert keys(removed) != keys(added)
    # the folder is back to its first state, but this is a new change: a key never used before
    # (the daemon would skip a repeated one, and the deletion would never be ingested)
    (alpha_first,) = [k for _, p, k in keys(first) if p == "alpha-deals"]
    (alpha_now,) = [k for _, p, k in keys(removed)]
    assert alpha_now.split(":")[-1] == alpha_first.split(":")[-1]  # same fingerprint
    assert alpha_now != alpha_first
    cursor = removed.cursor

    # a collection added to the config gets a partition; one removed is purged
    config = yaml.safe_load(config_path.read_text())
    config["collections"]["gamma-deals"] = {
        **config["collections"].pop("beta-deals"),
        "path": "sources/alpha",
    }
    config_path.write_text(yaml.safe_dump(config))
    reshaped = tick(settings, instance, cursor)
    assert [(j, p) for j, p, _ in keys(reshaped)] == [
        ("ingest_job", "gamma-deals"),
        ("purge_collection_job", None),
    ]
    purge = next(r for r in reshaped.run_requests or [] if r.job_name == "purge_collection_job")
    assert purge.run_config == {
        "ops": {"purge_collection_op": {"config": {"collection": "beta-deals"}}}
    }
    # the purge run removes the partition once it succeeded, not the sensor
    assert sorted(instance.get_dynamic_partitions("collections")) == [
        "alpha-deals",
        "beta-deals",
        "gamma-deals",
    ]


def test_scan_marks_a_missing_root(tmp_path: Path) -> None:
    config_path = write_home(tmp_path)
    settings = Settings(config_path=config_path, home=tmp_path / "home")
    (tmp_path / "sources" / "beta").rename(tmp_path / "elsewhere")
    scan = scan_sources(settings.load(), {}, ["alpha-deals", "beta-deals"])
    assert scan.cursor["fingerprints"]["beta-deals"] == "missing"
    assert scan.cursor["fingerprints"]["alpha-deals"].startswith("3:")


def test_a_cursor_in_the_earlier_flat_format_still_reads(tmp_path: Path) -> None:
    config_path = write_home(tmp_path)
    settings = Settings(config_path=config_path, home=tmp_path / "home")
    now = scan_sources(settings.load(), {}, [])
    flat = json.dumps(now.cursor["fingerprints"])
    fingerprints, changes = read_cursor(flat)
    assert fingerprints == now.cursor["fingerprints"] and changes == {}
    quiet = scan_sources(settings.load(), fingerprints, ["alpha-deals", "beta-deals"], changes)
    assert quiet.ingest == {} and quiet.purge == {}


def narrow_alpha(config: dict[str, Any]) -> None:
    config["collections"]["alpha-deals"]["acl_groups"] = ["alpha-uw"]


def drop_risk_assessment(config: dict[str, Any]) -> None:
    config["sections"] = {
        "market_analysis": {"granularity": "block"},
        "borrower_sponsor": {"granularity": "block"},
        "property": {"granularity": "block"},
        "risk_assessment": False,
    }


def change_input_format(config: dict[str, Any]) -> None:
    config["profiles"]["main"]["input_format"] = "heading-context-v1"


@pytest.mark.parametrize(
    ("edit", "ingested"),
    [
        (narrow_alpha, ["alpha-deals"]),
        (drop_risk_assessment, ["alpha-deals", "beta-deals"]),
        (change_input_format, ["alpha-deals", "beta-deals"]),
    ],
)
def test_a_collection_whose_config_changed_is_ingested_again(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], ingested: list[str]
) -> None:
    """An edit of corpus.yaml that changes no file still ingests the collections whose
    inputs it changes: narrowing a collection's ACL groups (so the narrowed scope reaches the
    index without a `corpus sync`), and for every collection, the ``sections:`` registry
    (taking ``risk_assessment`` out must stop it being searchable) or a profile's input
    format, which each collection's inputs are built under."""
    config_path = write_home(tmp_path)
    settings = Settings(config_path=config_path, home=tmp_path / "home")
    before = scan_sources(settings.load(), {}, [])
    fingerprints = before.cursor["fingerprints"]
    partitions = ["alpha-deals", "beta-deals"]
    assert scan_sources(settings.load(), fingerprints, partitions).ingest == {}
    config = yaml.safe_load(config_path.read_text())
    edit(config)
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    after = scan_sources(settings.load(), fingerprints, partitions)
    assert sorted(after.ingest) == ingested


@pytest.mark.parametrize(
    "cursor",
    [
        "not json",  # a hand edit in the UI's "Set cursor value"
        '{"fingerprints": {"alpha-deals": "x"}, "changes": {"alpha-deals": null}}',
        '{"fingerprints": "lost"}',
        "[1, 2]",
    ],
)
def test_a_damaged_cursor_is_read_as_no_cursor(
    tmp_path: Path, instance: dg.DagsterInstance, cursor: str
) -> None:
    """A cursor the sensor cannot read (the UI lets an operator set one by hand) would fail
    every tick until someone cleared it: it reads as no cursor instead, naming what is wrong."""
    config_path = write_home(tmp_path)
    settings = Settings(config_path=config_path, home=tmp_path / "home")
    with pytest.raises(ValueError, match="cursor"):
        read_cursor(cursor)
    result = tick(settings, instance, cursor)
    assert [(j, p) for j, p, _ in keys(result)] == [
        ("ingest_job", "alpha-deals"),
        ("ingest_job", "beta-deals"),
    ]
    assert set(json.loads(result.cursor or "")["fingerprints"]) == {"alpha-deals", "beta-deals"}


def test_an_unreadable_collection_root_does_not_stop_the_other_collections(
    tmp_path: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A root that exists but cannot be listed (EACCES: an NFS export with root squash, a
    permission change; root bypasses mode bits, so the listing is made to fail as the kernel
    would) is marked unreadable and left out, named in the tick's log; the others are
    ingested as usual, and it is again once it can be listed."""
    config_path = write_home(tmp_path)
    settings = Settings(config_path=config_path, home=tmp_path / "home")
    first = tick(settings, instance, None)
    beta = str(tmp_path / "sources" / "beta")
    real = os.scandir

    def scandir(path: str) -> object:
        if os.fspath(path).startswith(beta):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    scan = scan_sources(settings.load(), {}, ["alpha-deals", "beta-deals"])
    assert scan.cursor["fingerprints"]["beta-deals"] == "unreadable:13"
    assert "beta-deals" not in scan.ingest
    assert scan.unreadable["beta-deals"].startswith(f"{beta} (or a folder in it) cannot be listed")
    deal = tmp_path / "sources" / "alpha" / "deal-alpha-000.uw.md"
    deal.write_text(deal.read_text().replace("Rents grew", "Rents fell"))
    changed = tick(settings, instance, first.cursor)
    assert [(j, p) for j, p, _ in keys(changed)] == [("ingest_job", "alpha-deals")]
    # readable again, and changed meanwhile: ingested
    monkeypatch.setattr(os, "scandir", real)
    (tmp_path / "sources" / "beta" / "new.uw.md").write_text(deal.read_text())
    again = tick(settings, instance, changed.cursor)
    assert [(j, p) for j, p, _ in keys(again)] == [("ingest_job", "beta-deals")]


def launch(
    instance: dg.DagsterInstance,
    job: dg.JobDefinition,
    request: dg.RunRequest,
    status: dg.DagsterRunStatus = dg.DagsterRunStatus.SUCCESS,
) -> dg.DagsterRun:
    """Record the run the daemon makes of ``request``: its tags, with the partition, the
    sensor's name and the run key, by which the daemon skips a key it has seen before."""
    tags = {
        **request.tags,
        "dagster/sensor_name": "source_update_sensor",
        "dagster/run_key": request.run_key or "",
    }
    if request.partition_key:
        tags["dagster/partition"] = request.partition_key
    return instance.create_run_for_job(job, tags=tags, status=status)


def test_a_cleared_cursor_never_asks_a_run_key_the_daemon_has_seen(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    """A cursor cleared (`dagster sensor cursor --delete`, the UI) or read as none counted
    every collection's changes from 1 again: files back to a state of before (a file added,
    then removed) got the key of a run of long ago, which the daemon skips, and the cursor
    took the state as asked for, so the removed file's rows stayed in the index. The count
    goes on from the sensor's runs of the partition; the same state asked again keeps its
    key (the daemon's dedupe of a tick it evaluates again)."""
    config_path = write_home(tmp_path)
    settings = Settings(config_path=config_path, home=tmp_path / "home")
    ingest = build_definitions(settings).resolve_job_def("ingest_job")
    first = tick(settings, instance, None)
    for request in first.run_requests or []:
        launch(instance, ingest, request)
    extra = tmp_path / "sources" / "alpha" / "new.uw.md"
    extra.write_text((tmp_path / "sources" / "alpha" / "deal-alpha-000.uw.md").read_text())
    added = tick(settings, instance, first.cursor)
    for request in added.run_requests or []:
        launch(instance, ingest, request)
    used = {r.run_key for r in [*(first.run_requests or []), *(added.run_requests or [])]}
    extra.unlink()  # alpha is as the first tick saw it
    cleared = tick(settings, instance, None)
    alpha = {p: k for _, p, k in keys(cleared)}
    assert alpha["alpha-deals"] not in used
    assert alpha["alpha-deals"].startswith("ingest:alpha-deals:3:")
    # beta is as its one run was asked for: the same key, which the daemon skips
    assert alpha["beta-deals"] == {p: k for _, p, k in keys(first)}["beta-deals"]
    assert json.loads(cleared.cursor or "")["changes"] == {"alpha-deals": 3, "beta-deals": 1}


def test_a_change_while_its_ingest_run_is_queued_asks_for_no_run_more(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    """Files that keep changing while their collection's ingest run waits in the run queue (a
    copy of many files over several ticks) asked for a run each tick, every one ingesting the
    same files once it started: the queued run reads them as they are when it starts, so no
    run more is asked while it waits, and the change is compared again once it is gone (run,
    canceled or failed)."""
    config_path = write_home(tmp_path)
    settings = Settings(config_path=config_path, home=tmp_path / "home")
    ingest = build_definitions(settings).resolve_job_def("ingest_job")
    first = tick(settings, instance, None)
    requests = {r.partition_key: r for r in first.run_requests or []}
    # created by the daemon and not started (QUEUED asks for a code location's origin)
    waiting = launch(instance, ingest, requests["alpha-deals"], dg.DagsterRunStatus.NOT_STARTED)
    launch(instance, ingest, requests["beta-deals"])
    for name in ("alpha", "beta"):
        deal = tmp_path / "sources" / name / f"deal-{name}-000.uw.md"
        deal.write_text(deal.read_text().replace("Rents grew", "Rents fell"))
    changed = tick(settings, instance, first.cursor)
    assert [p for _, p, _ in keys(changed)] == ["beta-deals"]
    (tmp_path / "sources" / "alpha" / "new.uw.md").write_text(deal.read_text())
    again = tick(settings, instance, changed.cursor)
    assert keys(again) == []
    cursor = json.loads(again.cursor or "")
    assert (
        cursor["fingerprints"]["alpha-deals"]
        == json.loads(first.cursor or "")["fingerprints"]["alpha-deals"]
    )
    # canceled before it started: the change is asked for now
    instance.report_run_canceled(waiting)
    after = tick(settings, instance, again.cursor)
    assert [p for _, p, _ in keys(after)] == ["alpha-deals"]


def test_a_missing_collection_root_is_left_out_and_named_in_the_skip_reason(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    """A root that is gone (a mount not there yet, a folder moved) asks for no ingest run,
    which could only fail (three failed runs, alerts, then a growing wait): it is left out,
    named in the tick's skip reason with the unreadable ones, while the other collections are
    ingested as usual; once it is back, it is compared as usual."""
    config_path = write_home(tmp_path)
    settings = Settings(config_path=config_path, home=tmp_path / "home")
    first = tick(settings, instance, None)
    beta = tmp_path / "sources" / "beta"
    beta.rename(tmp_path / "moved")
    gone = tick(settings, instance, first.cursor)
    assert keys(gone) == []
    assert gone.skip_reason is not None
    assert f"{beta} does not exist or is not a folder" in str(gone.skip_reason)
    assert "beta-deals" in str(gone.skip_reason)
    deal = tmp_path / "sources" / "alpha" / "deal-alpha-000.uw.md"
    deal.write_text(deal.read_text().replace("Rents grew", "Rents fell"))
    changed = tick(settings, instance, gone.cursor)
    assert [(j, p) for j, p, _ in keys(changed)] == [("ingest_job", "alpha-deals")]
    (tmp_path / "moved").rename(beta)
    (beta / "new.uw.md").write_text(deal.read_text())
    again = tick(settings, instance, changed.cursor)
    assert [(j, p) for j, p, _ in keys(again)] == [("ingest_job", "beta-deals")]


@pytest.mark.slow
def test_a_change_whose_ingest_run_failed_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cursor takes the new fingerprint as the run is asked for, not as it succeeds: when
    the run fails (its worker killed and failed by orphaned_run_sensor, a transient error),
    the change is asked again under a new run key, while no run of it is in flight, until
    ``MAX_TRIES`` runs of it failed."""
    settings, _, home, first = synced(tmp_path, monkeypatch)
    instance = home.instance
    deal = tmp_path / "sources" / "beta" / "deal-beta-000.uw.md"
    deal.write_text(deal.read_text().replace("Rents grew", "Rents fell"))
    cursor, asked = first.cursor, []
    for _ in range(MAX_TRIES):
        result = tick(settings, instance, cursor)
        (request,) = result.run_requests or []
        assert request.partition_key == "beta-deals" and request.run_key not in asked
        asked.append(request.run_key)
        # the daemon launches it: while it is in flight, it is not asked again
        run = instance.create_run_for_job(
            home.defs.resolve_job_def("ingest_job"),
            tags={**request.tags, "dagster/partition": "beta-deals"},
        )
        assert keys(tick(settings, instance, result.cursor)) == []
        instance.report_run_failed(run, message="the run worker was killed")
        cursor = result.cursor
    waiting = tick(settings, instance, cursor)  # asked again once a wait is over
    assert keys(waiting) == [] and "beta-deals" in read_cursor_retrying(waiting)


def read_cursor_retrying(result: dg.SensorResult) -> dict[str, Any]:
    retrying: dict[str, Any] = json.loads(result.cursor or "{}").get("retrying", {})
    return retrying


def test_a_purge_that_keeps_failing_is_asked_again_after_a_growing_wait_and_alerted(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    """A collection removed from the config is purged by runs the sensor asks for; one that
    failed ``MAX_TRIES`` times in a row (a store down for an hour) is asked again once a wait
    since the last failure is over, the wait doubling with each failure up to a bound, and
    the sensor says it waits: the tick's log and skip reason, the cursor's ``retrying``, an
    alert. It used to stop asking for good after ``MAX_TRIES`` failures, without a word, and
    the removed collection's rows stayed in every generation."""
    settings = Settings(config_path=write_home(tmp_path), home=tmp_path / "home")
    instance.add_dynamic_partitions("collections", ["alpha-deals", "beta-deals", "gone-deals"])
    purge_job = build_definitions(settings).resolve_job_def("purge_collection_job")

    def purges(result: dg.SensorResult) -> list[dg.RunRequest]:
        return [r for r in result.run_requests or [] if r.job_name == "purge_collection_job"]

    def failed_run(request: dg.RunRequest) -> float:
        run = instance.create_run_for_job(
            purge_job, run_config=request.run_config, tags=request.tags
        )
        instance.report_run_failed(run, message="the object store did not answer")
        record = instance.get_run_records(dg.RunsFilter(run_ids=[run.run_id]))[0]
        assert record.end_time is not None
        return record.end_time

    cursor = None
    for _ in range(MAX_TRIES):
        result = tick(settings, instance, cursor)
        (request,) = purges(result)
        assert request.tags[PURGE_TAG] == "gone-deals"
        ended = failed_run(request)
        cursor = result.cursor
    waiting = tick(settings, instance, cursor)
    assert purges(waiting) == [] and not waiting.run_requests
    assert "gone-deals" in str(waiting.skip_reason) and "failed 3 runs in a row" in str(
        waiting.skip_reason
    )
    retrying = read_cursor_retrying(waiting)["gone-deals"]
    assert retrying["job"] == "purge_collection_job" and retrying["failures"] == MAX_TRIES
    assert read_cursor(waiting.cursor)[0] == read_cursor(cursor)[0]  # the cursor still reads
    (alert,) = [a for a in alerts(settings.home) if a.job == "source_update_sensor"]
    assert alert.partition == "gone-deals" and "asked again at" in alert.error
    tick(settings, instance, waiting.cursor)
    assert len(alerts(settings.home)) == 1  # one alert per failed run, not per tick

    config = settings.load()
    parts = list(instance.get_dynamic_partitions("collections"))
    fps, changes = read_cursor(waiting.cursor)

    def asked(now: float) -> dict[str, str]:
        return scan_sources(config, fps, parts, changes, runs=recent_runs(instance), now=now).purge

    assert asked(ended + RETRY_BACKOFF_S - 1) == {}
    (again,) = asked(ended + RETRY_BACKOFF_S + 1).items()
    # the daemon launches it; it fails too, and the next wait is twice as long
    config_of_purge = {"ops": {"purge_collection_op": {"config": {"collection": "gone-deals"}}}}
    ended = failed_run(
        dg.RunRequest(run_key=again[1], run_config=config_of_purge, tags={PURGE_TAG: "gone-deals"})
    )
    assert asked(ended + RETRY_BACKOFF_S + 1) == {}
    assert "gone-deals" in asked(ended + 2 * RETRY_BACKOFF_S + 1)
    assert 2 * RETRY_BACKOFF_S <= MAX_BACKOFF_S


@pytest.mark.slow
def test_a_removed_collection_is_purged_even_if_the_first_purge_run_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collection removed from the config keeps its partition until a purge of it succeeds
    (the purge run removes it): a purge run that failed (killed worker, canceled, a transient
    error) is asked again, and `corpus sync` purges it too. The sensor used to remove the
    partition as it asked for the purge, so after a failed one nothing ever purged it: its
    rows stayed in every generation and failed every later generation's checks."""
    settings, runner, home, first = synced(tmp_path, monkeypatch)
    config_path, instance = settings.config_path, home.instance
    config = yaml.safe_load(config_path.read_text())
    del config["collections"]["beta-deals"]
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    removal = tick(settings, instance, first.cursor)
    (request,) = removal.run_requests or []
    assert request.job_name == "purge_collection_job"
    assert "beta-deals" in instance.get_dynamic_partitions("collections")
    # the daemon launches it: while it is in flight, it is not asked again; then it fails
    run = instance.create_run_for_job(
        home.defs.resolve_job_def("purge_collection_job"),
        run_config=request.run_config,
        tags=request.tags,
    )
    assert keys(tick(settings, instance, removal.cursor)) == []
    instance.report_run_failed(run, message="the run worker was killed")
    again = tick(settings, instance, removal.cursor)
    (retry,) = again.run_requests or []
    assert retry.run_config == request.run_config and retry.run_key != request.run_key

    report = runner.sync(settings)
    assert report.ok and report.purged_collections == ["beta-deals"], report.failed_runs
    corpus = Home(settings)
    left = {
        g.id: corpus.store.count(g, "collection = 'beta-deals'")
        for g in corpus.registry.generations()
    }
    assert set(left.values()) == {0}, left
    # the purge run removed the partition: nothing left to ask for
    assert sorted(instance.get_dynamic_partitions("collections")) == ["alpha-deals"]
    assert keys(tick(settings, instance, again.cursor)) == []


def test_an_ingest_waits_for_a_run_writing_the_collections_profile_partitions(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    """A collection whose files changed while a run of its profile partitions (embeddings,
    sidecars, index rows) is queued or in flight is not ingested beside it: the run queue
    limits runs per collection only among profile runs (an ingest run carries no
    ``dagster/partition/collection`` tag), so the ingest started at once and could rewrite
    the collection's inputs between that run's embeddings and its index rows. It is asked
    for once that run has ended; the other collections are not held back."""
    settings = Settings(config_path=write_home(tmp_path), home=tmp_path / "home")
    instance.add_dynamic_partitions("collections", ["alpha-deals", "beta-deals"])
    embed_job = build_definitions(settings).resolve_job_def("embed_job")
    tags = embed_job.get_tags_for_partition_key("alpha-deals|main", selected_asset_keys=None)
    run = instance.create_run_for_job(embed_job, tags=tags, status=dg.DagsterRunStatus.STARTED)
    waiting = tick(settings, instance, None)
    assert [(j, p) for j, p, _ in keys(waiting)] == [("ingest_job", "beta-deals")]
    assert "alpha-deals" not in json.loads(waiting.cursor or "{}")["fingerprints"]
    assert keys(tick(settings, instance, waiting.cursor)) == []
    instance.report_run_failed(run, message="ended")
    after = tick(settings, instance, waiting.cursor)
    assert [(j, p) for j, p, _ in keys(after)] == [("ingest_job", "alpha-deals")]
