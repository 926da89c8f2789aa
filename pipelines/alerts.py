"""``run_failure_alert_sensor``: every failed run of the home, recorded where an operator looks.

A blocking check that fails inside a run the automation sensor started shows nowhere an
operator watches: the backfill reads as done and the run is hidden from the default runs list.
This sensor records each failed run (its job, partition, failed steps and checks, the error)
in ``<home>/alerts.jsonl`` and logs it; ``corpus alerts`` lists what is not acknowledged.
It watches every run of the instance, the ones `corpus sync` runs in-process included.
"""

from datetime import UTC, datetime

import dagster as dg

from assets import CorpusResource
from corpus_index.alerts import Alert, record_alert
from pipelines.sensors import sensor_interval
from pipelines.sync import check_failed, error_line


def alert_for_run(instance: dg.DagsterInstance, run: dg.DagsterRun) -> Alert:
    """What failed in ``run``, read from ``instance``'s event log."""
    events = instance.get_records_for_run(
        run.run_id,
        of_type={
            dg.DagsterEventType.STEP_FAILURE,
            dg.DagsterEventType.ASSET_CHECK_EVALUATION,
            dg.DagsterEventType.RUN_FAILURE,
        },
    ).records
    steps: list[str] = []
    checks: list[str] = []
    error = ""
    failed_at = ""
    for record in events:
        event = record.event_log_entry.dagster_event
        if event is None:
            continue
        if event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
            check = event.event_specific_data
            if check_failed(check):  # type: ignore[arg-type]
                partition = f"[{check.partition}]" if getattr(check, "partition", None) else ""  # type: ignore[union-attr]
                checks.append(f"{check.asset_key.to_user_string()}:{check.check_name}{partition}")  # type: ignore[union-attr]
        elif event.event_type == dg.DagsterEventType.STEP_FAILURE:
            steps.append(str(event.step_key))
            error = error or error_line(getattr(event.event_specific_data, "error", None))
        else:
            failed_at = datetime.fromtimestamp(record.timestamp, UTC).isoformat(timespec="seconds")
            error = error or error_line(getattr(event.event_specific_data, "error", None))
            error = error or str(event.message or "")
    return Alert(
        run_id=run.run_id,
        job=run.job_name,
        failed_at=failed_at or datetime.now(UTC).isoformat(timespec="seconds"),
        partition=run.tags.get("dagster/partition", ""),
        failed_steps=tuple(steps),
        failed_checks=tuple(checks),
        error=error,
    )


@dg.run_failure_sensor(
    name="run_failure_alert_sensor",
    monitor_all_code_locations=True,  # `corpus sync`'s in-process runs have no code location
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=sensor_interval(),
    description="Records every failed run (job, partition, failed checks and steps) in "
    "<home>/alerts.jsonl; `corpus alerts` lists them.",
)
def run_failure_alert_sensor(context: dg.RunFailureSensorContext, corpus: CorpusResource) -> None:
    alert = alert_for_run(context.instance, context.dagster_run)
    if record_alert(corpus.settings().home, alert):
        context.log.error(f"ALERT {alert.summary()}")
