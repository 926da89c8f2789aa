"""A run whose `corpus` process, or whose run worker, was killed is failed by the next sync and
by the daemon's ``orphaned_run_sensor``, not left STARTED for run monitoring's four hours (with
the eager automation skipping what it planned meanwhile)."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner
from dagster._core.events import EngineEventData

from assets.processes import run_worker
from corpus_index.alerts import alerts
from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.dagster_home import prepare
from pipelines.devserver import DevServer, dagster_dev
from pipelines.orphans import (
    PROCESS_TAG,
    WORKER_STARTED,
    Process,
    fail_orphaned_runs,
    orphaned_run_sensor,
    orphaned_runs,
    started_worker,
    this_process,
)
from tests.corpusgen import write_home
from tests.dagster.killed import LIMIT_S, killed_sync


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


@dg.op
def _noop() -> None:
    pass


@dg.job
def _short() -> None:
    _noop()


def test_the_sensor_fails_a_run_whose_process_is_gone(tmp_path: Path) -> None:
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        alive = this_process()
        # the same pid started at another time is another process (the pid was used again)
        again = Process(alive.host, alive.pid, "1")
        assert alive.alive() and not again.alive()
        orphan = instance.create_run_for_job(_short, tags={PROCESS_TAG: again.tag})
        own = instance.create_run_for_job(_short, tags={PROCESS_TAG: alive.tag})
        untagged = instance.create_run_for_job(_short)
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


def _worker_started(instance: dg.DagsterInstance, pid: int, at: float) -> dg.DagsterRun:
    """A STARTED, untagged run whose worker Dagster recorded starting as ``pid`` at ``at``
    (the engine event a run worker writes as it starts, before it loads the code)."""
    run = instance.create_run_for_job(_short, status=dg.DagsterRunStatus.STARTED)
    event = dg.DagsterEvent(
        event_type_value=dg.DagsterEventType.ENGINE_EVENT.value,
        job_name=run.job_name,
        message=f"{WORKER_STARTED} (pid: {pid}).",
        event_specific_data=EngineEventData.in_process(pid),
    )
    instance.store_event(
        dg.EventLogEntry(None, logging.INFO, "", run.run_id, at, dagster_event=event)
    )
    return run


def test_a_run_worker_killed_before_its_first_step_is_judged_by_its_recorded_pid(
    tmp_path: Path,
) -> None:
    """A run worker killed before its first step left no tag: on the embedded instance the
    pid Dagster recorded as it started it says whether it still runs (the process holding
    that pid must have started before the record); elsewhere such a run is left alone."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        now = time.time()
        with dg.DagsterInstance.from_config(str(prepare(tmp_path / "dagster"))) as instance:
            killed = _worker_started(instance, gone.pid, now)
            running = _worker_started(instance, live.pid, now)
            # recorded an hour before the live process started: the pid was given to it later
            reused = _worker_started(instance, live.pid, now - 3600)
            queued = instance.create_run_for_job(_short)  # no worker started yet
            worker = started_worker(instance, running.run_id)
            assert worker is not None and worker.pid == live.pid and worker.alive()
            assert started_worker(instance, queued.run_id) is None
            found = {r.run_id: p.pid for r, p in orphaned_runs(instance)}
            assert found == {killed.run_id: gone.pid, reused.run_id: live.pid}
            assert sorted(fail_orphaned_runs(instance)) == sorted(found)
            status = {
                r.run_id: r.status
                for r in instance.get_runs()
                if r.run_id in (running.run_id, queued.run_id, killed.run_id)
            }
            assert status == {
                killed.run_id: dg.DagsterRunStatus.FAILURE,
                running.run_id: dg.DagsterRunStatus.STARTED,
                queued.run_id: dg.DagsterRunStatus.NOT_STARTED,
            }
        # an instance other machines may share (not the embedded one): left to run monitoring
        (tmp_path / "other").mkdir()
        with dg.instance_for_test(temp_dir=str(tmp_path / "other")) as instance:
            _worker_started(instance, gone.pid, now)
            assert orphaned_runs(instance) == []
    finally:
        live.kill()
        live.wait()


def _worker_of_step() -> str:  # runs in a process multiprocessing started, as a step's is
    return run_worker(step_processes=True).tag


def test_a_step_process_names_the_process_that_started_it() -> None:
    """With the multiprocess executor each step is a process the run worker started: the tag
    names the run worker, which lives as long as the run, not the step."""
    with multiprocessing.get_context("forkserver").Pool(1) as pool:
        tag = pool.apply(_worker_of_step)
    assert tag == this_process().tag
    # in the run worker itself (or execute_in_process) it is the process calling
    assert run_worker(step_processes=True).tag == run_worker(step_processes=False).tag


def _tagged_run(instance: dg.DagsterInstance, server: DevServer) -> dg.DagsterRun:
    """The first STARTED run seen carrying a process tag."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < LIMIT_S:
        started = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
        tagged = next((r for r in started if PROCESS_TAG in r.tags), None)
        if tagged is not None:
            return tagged
        time.sleep(0.2)
    tail = server.log.read_text(errors="replace")[-3000:]
    raise AssertionError(f"no tagged STARTED run within {LIMIT_S} s\n{tail}")


def _failure(instance: dg.DagsterInstance, run_id: str, server: DevServer) -> str:
    """The message the run was failed with, once it is."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < LIMIT_S:
        run = instance.get_run_by_id(run_id)
        assert run is not None
        if run.status == dg.DagsterRunStatus.FAILURE:
            print(f"failed {time.monotonic() - t0:.1f} s after its run worker was killed")
            return "\n".join(
                e.message
                for e in instance.all_logs(run_id)
                if e.dagster_event is not None
                and e.dagster_event.event_type_value == "PIPELINE_FAILURE"
            )
        time.sleep(1.0)
    tail = server.log.read_text(errors="replace")[-3000:]
    raise AssertionError(f"run still {run.status} after {LIMIT_S} s\n{tail}")


@pytest.mark.slow
@pytest.mark.daemon
def test_a_run_the_daemon_launched_is_failed_after_dagster_dev_was_killed(
    tmp_path: Path,
) -> None:
    """A run the sensors launch is executed by a run worker the code server starts, and its
    first step tags the run with that process. The code server fails a run whose worker dies
    while it lives; killed with it (``dagster dev`` killed, the OOM killer), the run was left
    STARTED for run monitoring's four hours. The next ``dagster dev`` fails it at the
    sensor's first tick, naming the worker."""
    settings = Settings(config_path=write_home(tmp_path), home=tmp_path / "home")
    dagster_home = prepare(settings.dagster_home)
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        with dagster_dev(settings, sensor_interval_s=5) as server:
            run = _tagged_run(instance, server)
            worker = Process.of_tag(run.tags[PROCESS_TAG])
            # killed as soon as it is seen, the checks after: on a loaded machine the run could
            # end while they are made (webserver, daemon, code server, run worker)
            os.killpg(server.pid, signal.SIGKILL)
            assert worker is not None and worker.host == socket.gethostname()
            assert worker.pid not in (server.pid, os.getpid())
            # what an untagged run is judged by: Dagster's record of the worker it started
            assert started_worker(instance, run.run_id) == worker
            t0 = time.monotonic()
            while worker.alive() and time.monotonic() - t0 < LIMIT_S:
                time.sleep(0.2)
            assert not worker.alive()
        left = instance.get_run_by_id(run.run_id)
        assert left is not None and left.status == dg.DagsterRunStatus.STARTED
        with dagster_dev(settings, sensor_interval_s=600, log=tmp_path / "again.log") as server:
            message = _failure(instance, run.run_id, server)
    assert f"pid {worker.pid} on {worker.host}" in message
