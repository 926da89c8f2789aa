"""Runs whose process ended without ending them: failed, so that nothing waits on them.

`corpus sync` and the other commands execute their runs in their own process; the daemon and
the UI launch theirs into a run worker. A process that is killed (``kill -9``, the OOM killer, a lost shell) leaves its run STARTED in the instance:
the UI shows it running, the declarative automation skips every partition it planned (they
are in progress), and Dagster's run monitoring fails it only after ``max_runtime_seconds``
(four hours, see :mod:`corpus_index.dagster_home`), and only where the daemon runs.

So each run is tagged with the process executing it (:data:`~assets.processes.PROCESS_TAG`:
host, pid and the process's start time, so that a pid the system has given to a later process
is not taken for it; a command tags its runs as it starts them, a run worker's run is tagged by
its first step, see :mod:`assets.processes`), and :func:`fail_orphaned_runs` reports failed the in-flight runs of this
host whose process no longer exists, naming it; the run failure sensor then records each as an
alert, and the pool slots the run held are freed. It runs at the start of every `corpus sync`
and on each tick of ``orphaned_run_sensor`` in the daemon. A run of another host is left to
that host's commands and sensor (or to run monitoring).

A run worker killed before its first step (loading the code, planning, starting the step's
process) left its run untagged. Dagster records the worker's pid as it starts it (an engine
event, "Started process for run"), without the host; on the embedded instance, whose SQLite
files only this machine's processes write, that pid is this host's, and an untagged run is
judged by it (the process holding the pid now must have started before the record, or the
pid was given to another since: :func:`~assets.processes.recorded`). On the production
instance an untagged run is left to run monitoring, as a run still queued is everywhere.
"""

from __future__ import annotations

import socket
from pathlib import Path

import dagster as dg

from assets.processes import PROCESS_TAG, Process, recorded, this_process
from corpus_index.dagster_home import EMBEDDED

ORPHAN_INTERVAL_S = 60  # seconds between the sensor's ticks
# Dagster's engine event as a run worker starts, with the worker's pid in its metadata
WORKER_STARTED = "Started process for run"
# a run in these states is in flight: some process is (or was) about to execute it
IN_FLIGHT = [
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


def process_tags() -> dict[str, str]:
    """The tags of a run this process executes (``execute_in_process(tags=...)``)."""
    return {PROCESS_TAG: this_process().tag}


def orphaned_runs(instance: dg.DagsterInstance) -> list[tuple[dg.DagsterRun, Process]]:
    """The in-flight runs of this host whose executing process is gone, each with it."""
    host = socket.gethostname()
    one_machine = _embedded(instance)
    out = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT)):
        process = Process.of_tag(run.tags.get(PROCESS_TAG, ""))
        if process is None and one_machine:
            process = started_worker(instance, run.run_id)
        if process is not None and process.host == host and not process.alive():
            out.append((run, process))
    return out


def started_worker(instance: dg.DagsterInstance, run_id: str) -> Process | None:
    """The run worker Dagster last recorded starting for the run (:data:`WORKER_STARTED`), as
    a process of this host (:func:`~assets.processes.recorded`); None before one started."""
    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, ascending=False
    ).records
    for record in records:
        entry = record.event_log_entry
        event = entry.dagster_event
        data = event.event_specific_data if event is not None else None
        pid = getattr(data, "metadata", {}).get("pid")
        text = str(getattr(pid, "value", ""))
        if entry.message.startswith(WORKER_STARTED) and text.isdigit():
            return recorded(int(text), entry.timestamp)
    return None


def _embedded(instance: dg.DagsterInstance) -> bool:
    """Whether ``instance`` is the embedded default (`corpus_index.dagster_home`): SQLite
    files in its folder, which only this machine's processes write."""
    try:
        with Path(instance.root_directory, "dagster.yaml").open(encoding="utf-8") as f:
            return f.readline().startswith(EMBEDDED)
    except (OSError, UnicodeDecodeError, dg.DagsterInvariantViolationError):
        return False


def fail_orphaned_runs(instance: dg.DagsterInstance) -> list[str]:
    """Report failed every run :func:`orphaned_runs` finds, and free the pool slots it held;
    returns their run ids."""
    failed = []
    for run, process in orphaned_runs(instance):
        instance.report_run_failed(
            run,
            message=f"pid {process.pid} on {process.host}, which executed this run, ended "
            "before the run did (killed?): the run is failed so nothing waits on it",
        )
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        failed.append(run.run_id)
    return failed


@dg.sensor(
    name="orphaned_run_sensor",
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=ORPHAN_INTERVAL_S,
    description="Fails the runs of this host left in flight by a `corpus` command whose "
    "process ended (killed), so the automation and the run queue stop waiting on them.",
)
def orphaned_run_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    failed = fail_orphaned_runs(context.instance)
    for run_id in failed:
        context.log.warning(f"run {run_id} failed: the process that executed it ended")
    return dg.SkipReason(
        f"failed {len(failed)} orphaned run(s): {', '.join(failed)}"
        if failed
        else "no orphaned runs"
    )
