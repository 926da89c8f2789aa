"""The only place the Dagster Definitions are assembled."""

from __future__ import annotations

import os

import dagster as dg

from assets import CorpusResource, build_assets
from corpus_index.config import Settings
from corpus_index.environment import configure_environment
from corpus_index.lifecycle import retire_choices
from pipelines.alerts import run_failure_alert_sensor
from pipelines.jobs import build_jobs, compaction_schedule
from pipelines.orphans import orphaned_run_sensor
from pipelines.partitions import build_partitions
from pipelines.reprocess import reprocess_job, reprocess_schedule
from pipelines.runner import DagsterRunner
from pipelines.sensors import automation_sensor, source_update_sensor

# a process per step, forked from a server that imported the code location once: a step does
# not pay for importing Dagster, the project and its libraries again
MULTIPROCESS_EXECUTOR = dg.multiprocess_executor.configured({"start_method": {"forkserver": {}}})


def build_definitions(settings: Settings | None = None) -> dg.Definitions:
    """Definitions for ``settings``, by default those the environment names (CORPUS_CONFIG, CORPUS_HOME)."""
    environment = configure_environment()  # the one place the process environment is read
    settings = settings or environment.settings
    config = settings.load()
    partitions = build_partitions(config)
    # CORPUS_EXECUTOR=multiprocess: a process per step, and runs of one home side by side (each
    # step holds the home's lock shared and the scope locks of what it writes)
    multiprocess = environment.executor == "multiprocess"
    return dg.Definitions(
        assets=build_assets(partitions),
        jobs=[*build_jobs(partitions, retire_choices(settings)), reprocess_job],
        sensors=[
            source_update_sensor,
            automation_sensor,
            run_failure_alert_sensor,
            orphaned_run_sensor,
        ],
        schedules=[compaction_schedule, reprocess_schedule],
        # by default every step of a run in one process: no per-step interpreter start (and
        # model load)
        executor=MULTIPROCESS_EXECUTOR if multiprocess else dg.in_process_executor,
        resources={
            "corpus": CorpusResource(
                config_path=str(settings.config_path),
                home=str(settings.home),
                # read from the environment where it came from, so the UI's Resources page
                # names the variable, never the URL and its password
                registry_url=(
                    dg.EnvVar("CORPUS_REGISTRY")
                    if settings.registry_url
                    and os.environ.get("CORPUS_REGISTRY") == settings.registry_url
                    else settings.registry_url
                ),
                storage=settings.storage,
                runs_share_home=multiprocess,
            ),
        },
    )


@dg.definitions
def defs() -> dg.Definitions:
    """The code location's Definitions, built when Dagster loads them (not at import)."""
    return build_definitions()


def dagster_runner() -> DagsterRunner:
    """The pipeline runner of the ``corpus`` CLI and ``CorpusIndex`` (entry point
    ``corpus_index.runners: dagster``): jobs run in-process on the home's Dagster instance
    (the PostgreSQL one when ``CORPUS_DAGSTER_POSTGRES_URL`` is set)."""
    env = configure_environment()
    return DagsterRunner(
        build_definitions,
        postgres=env.dagster_postgres,
        postgres_location=env.dagster_postgres_location,
    )
