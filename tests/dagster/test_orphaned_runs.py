"""A run whose `corpus` process was killed is failed by the next sync and by the daemon's
``orphaned_run_sensor``, not left STARTED for run monitoring's four hours (with the eager
automation skipping what it planned meanwhile)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from corpus_index.alerts import alerts
from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.dagster_home import prepare
from pipelines.orphans import (
    PROCESS_TAG,
    Process,
    fail_orphaned_runs,
    orphaned_run_sensor,
    orphaned_runs,
    this_process,
)
from tests.corpusgen import write_home
from tests.dagster.killed import killed_sync


def test_a_killed_syncs_run_is_failed_by_the_next_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(config_path=write_home(tmp_path), home=tmp_path / "home")
    dagster_home = prepare(settings.dagster_home)
    run_id, pid = killed_sync(settings, dagster_home)
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        run = instance.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.STARTED
        assert run.tags[PROCESS_TAG].split(" ")[:2] == [socket.gethostname(), str(pid)]
        assert [r.run_id for r, _ in orphaned_runs(instance)] == [run_id]
        # a run another host executes is left to that host
        instance.add_run_tags(run_id, {PROCESS_TAG: f"elsewhere.example {pid} 1"})
        assert orphaned_runs(instance) == []
        instance.add_run_tags(run_id, {PROCESS_TAG: run.tags[PROCESS_TAG]})

    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    base = ["--config", str(settings.config_path), "--home", str(settings.home)]
    synced = CliRunner().invoke(main, [*base, "sync", "--json"])
    assert synced.exit_code == 0, synced.output
    report = json.loads(synced.stdout)
    assert report["orphaned_runs"] == [run_id]
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        run = instance.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.FAILURE
        # the sync's own runs name this process, which is alive: none is taken for an orphan
        mine = [instance.get_run_by_id(r) for r in report["runs"]]
        assert mine and all(
            r is not None and r.tags[PROCESS_TAG] == this_process().tag for r in mine
        )
        assert orphaned_runs(instance) == []
    (alert,) = [a for a in alerts(settings.home) if a.run_id == run_id]
    assert f"pid {pid} on {socket.gethostname()}" in alert.error


def test_the_sensor_fails_a_run_whose_process_is_gone(tmp_path: Path) -> None:
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:

        @dg.op
        def noop() -> None:
            pass

        @dg.job
        def short() -> None:
            noop()

        alive = this_process()
        # the same pid started at another time is another process (the pid was used again)
        again = Process(alive.host, alive.pid, "1")
        assert alive.alive() and not again.alive()
        orphan = instance.create_run_for_job(short, tags={PROCESS_TAG: again.tag})
        own = instance.create_run_for_job(short, tags={PROCESS_TAG: alive.tag})
        untagged = instance.create_run_for_job(short)
        with dg.build_sensor_context(instance=instance) as context:
            skipped = orphaned_run_sensor(context)
        assert isinstance(skipped, dg.SkipReason) and orphan.run_id in str(skipped.skip_message)
        runs = [instance.get_run_by_id(r.run_id) for r in (orphan, own, untagged)]
        status = {r.run_id: r.status for r in runs if r is not None}
        assert status == {
            orphan.run_id: dg.DagsterRunStatus.FAILURE,
            own.run_id: dg.DagsterRunStatus.NOT_STARTED,
            untagged.run_id: dg.DagsterRunStatus.NOT_STARTED,
        }
        assert fail_orphaned_runs(instance) == []  # once
