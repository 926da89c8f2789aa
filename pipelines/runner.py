"""In-process runs of the jobs against the home's Dagster instance, for the CLI.

The runs land in the same instance the UI reads (``<home>/dagster``), so what the CLI does
shows in the Dagster UI like any launched run. Each command holds the home's lock around its
runs (the runs' own hold of it, through the ``corpus`` resource, nests inside), so one that
finds a run from the UI or the daemon in flight is refused at once (``HomeBusyError``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dagster as dg
import sqlalchemy.exc
from dagster_postgres.utils import DagsterPostgresException

from corpus_index.alerts import record_alert
from corpus_index.config import CorpusConfig, Settings
from corpus_index.dagster_home import POSTGRES_URL_ENV, prepare
from corpus_index.errors import MissingGenerationError, RetryableError, UnknownNamespaceError
from corpus_index.eval_report import eval_report
from corpus_index.home import Home as CorpusHome
from corpus_index.homelock import home_lock_of
from corpus_index.lifecycle import newest_ready
from pipelines.alerts import alert_for_run
from pipelines.orphans import process_tags
from pipelines.sync import (
    SILENT_RUN_CONFIG,
    SyncReport,
    failed_checks,
    first_error,
    refresh_eval_report,
    run_sync,
)

warnings.filterwarnings("ignore", message=r".*is currently in (preview|beta)")


Build = Callable[[Settings], dg.Definitions]


@dataclass(frozen=True)
class Home:
    """The Definitions, configuration and Dagster instance of one corpus home."""

    defs: dg.Definitions
    config: CorpusConfig
    instance: dg.DagsterInstance


@dataclass(frozen=True)
class JobOutcome:
    """Whether a run succeeded, its id, and the first error if it did not."""

    success: bool
    run_id: str
    error: str = ""
    failed_checks: tuple[str, ...] = ()


class DagsterRunner:
    """``corpus_index.runner.PipelineRunner`` on the home's Dagster instance.

    ``build`` assembles the Definitions of a home: ``definitions.build_definitions``, which
    hands itself in (``definitions.dagster_runner``, the ``corpus_index.runners`` entry point),
    so this layer never imports the one above it.
    """

    def __init__(
        self, build: Build, *, postgres: bool = False, postgres_location: str = ""
    ) -> None:
        self.build = build
        self.postgres = postgres  # the instance in <home>/dagster keeps its runs in PostgreSQL
        self.postgres_location = postgres_location  # its URL without the password, for messages

    def open_home(self, settings: Settings) -> Home:
        """Point Dagster at ``<home>/dagster`` and build the Definitions for ``settings``.

        Raises:
            RetryableError: the instance's PostgreSQL database cannot be reached (named by
                ``CORPUS_DAGSTER_POSTGRES_URL``, without its password).
        """
        os.environ["DAGSTER_HOME"] = str(prepare(settings.dagster_home, postgres=self.postgres))
        defs = self.build(settings)
        try:
            instance = dg.DagsterInstance.get()
        except (DagsterPostgresException, sqlalchemy.exc.OperationalError) as exc:
            if not self.postgres:
                raise
            raise RetryableError(
                f"{POSTGRES_URL_ENV}: cannot reach Dagster's database "
                f"{self.postgres_location or '(unnamed)'}: {driver_reason(exc)}; check the "
                "URL's host, port, database, user and password, and that the server is up"
            ) from None
        if self.postgres:
            initialize_pools(instance, defs)
        return Home(defs, settings.load(), instance)

    def sync(
        self, settings: Settings, *, progress: Any = None, retry_refused: bool = False
    ) -> SyncReport:
        """Run the asset graph for every configured collection under the home's lock, refresh
        ``retrieval_evals`` when what it shows changed, and record each failed run as an alert.
        ``retry_refused``: send again the inputs the embedders' servers refused before."""
        from corpus_index.registry import open_registry

        home = self.open_home(settings)
        with home_lock_of(settings, "sync"):
            report = run_sync(
                home.defs,
                home.config,
                home.instance,
                progress=progress,
                settings=settings,
                retry_refused=retry_refused,
            )
            evals = eval_report(open_registry(settings))
            refresh_eval_report(home.defs, home.instance, evals.fingerprint, report)
        failed = [f["run_id"] for f in report.failed_runs] + report.orphaned_runs
        for run_id in failed:  # where `corpus alerts` (and the daemon) look
            run = home.instance.get_run_by_id(run_id)
            if run is not None:
                record_alert(settings.home, alert_for_run(home.instance, run))
        report.stale = [
            {**row, "since": row["since"].isoformat()}
            for row in open_registry(settings).stale_sources()
        ]
        return report

    def promote(
        self, settings: Settings, namespace: str, generation: str, *, expect_active: str = ""
    ) -> JobOutcome:
        """Materialize ``active_generation`` for ``namespace`` through the promote job."""
        return self._promotion(settings, namespace, generation, "promote", expect_active)

    def rollback(
        self, settings: Settings, namespace: str, *, expect_active: str = ""
    ) -> JobOutcome:
        """Materialize ``active_generation`` for ``namespace`` through the rollback job."""
        return self._promotion(settings, namespace, "", "rollback", expect_active)

    def _promotion(
        self, settings: Settings, namespace: str, generation: str, action: str, expect_active: str
    ) -> JobOutcome:
        if namespace not in settings.load().namespaces:
            # said here, before the run: the job's partitions would refuse it as a key unknown
            raise UnknownNamespaceError(f"no namespace {namespace!r} is configured")
        home = self.open_home(settings)
        if action == "promote" and not generation:
            # the operator asked to promote without naming one: the newest READY generation,
            # named here, since the asset never picks one by itself
            try:
                generation = newest_ready(CorpusHome(settings), namespace).id
            except MissingGenerationError as exc:
                return JobOutcome(success=False, run_id="", error=str(exc))
        job = "rollback_generation_job" if action == "rollback" else "promote_generation_job"
        config = {"generation": generation, "action": action, "expect_active": expect_active}
        run_config = {
            "ops": {"active_generation": {"config": config}},
            **SILENT_RUN_CONFIG,
        }
        with home_lock_of(settings, action):
            result = home.defs.resolve_job_def(job).execute_in_process(
                tags=process_tags(),
                partition_key=namespace,
                instance=home.instance,
                run_config=run_config,
                raise_on_error=False,
            )
        return outcome(result)

    def retire(self, settings: Settings, generation: str) -> JobOutcome:
        """Run ``retire_generation_job`` for ``generation``."""
        home = self.open_home(settings)
        run_config = {
            "ops": {"retire_generation": {"config": {"generation": generation}}},
            **SILENT_RUN_CONFIG,
        }
        with home_lock_of(settings, "retire"):
            result = home.defs.resolve_job_def("retire_generation_job").execute_in_process(
                tags=process_tags(),
                instance=home.instance,
                run_config=run_config,
                raise_on_error=False,
            )
        return outcome(result)

    def compact(
        self, settings: Settings, retention_hours: float
    ) -> tuple[JobOutcome, dict[str, Any]]:
        """Run ``compaction_job``; the outcome and the compaction report."""
        home = self.open_home(settings)
        run_config = {
            "ops": {"compact_op": {"config": {"retention_hours": retention_hours}}},
            **SILENT_RUN_CONFIG,
        }
        with home_lock_of(settings, "compact"):
            result = home.defs.resolve_job_def("compaction_job").execute_in_process(
                tags=process_tags(),
                instance=home.instance,
                run_config=run_config,
                raise_on_error=False,
            )
        report = result.output_for_node("compact_op") if result.success else {}
        return outcome(result), report

    def reprocess(
        self, settings: Settings, now: str, *, collection: str = ""
    ) -> tuple[JobOutcome, dict[str, Any], SyncReport | None]:
        """Run ``reprocess_job`` at ``now``, then sync the collections it re-linked (so their
        changed groups are embedded and indexed), under the home's lock."""
        home = self.open_home(settings)
        run_config = {
            "ops": {"reprocess_op": {"config": {"now": now, "collection": collection}}},
            **SILENT_RUN_CONFIG,
        }
        with home_lock_of(settings, "reprocess"):
            result = home.defs.resolve_job_def("reprocess_job").execute_in_process(
                tags=process_tags(),
                instance=home.instance,
                run_config=run_config,
                raise_on_error=False,
            )
            if not result.success:
                return outcome(result), {}, None
            report: dict[str, Any] = result.output_for_node("reprocess_op")
            touched = sorted(report["collections"])
            synced = (
                run_sync(home.defs, home.config, home.instance, only=touched) if touched else None
            )
        return outcome(result), report, synced

    def eval_report(self, settings: Settings) -> JobOutcome:
        """Materialize ``retrieval_evals`` so the UI shows the newest `corpus eval` figures."""
        home = self.open_home(settings)
        result = home.defs.resolve_job_def("eval_report_job").execute_in_process(
            tags=process_tags(),
            instance=home.instance,
            run_config=SILENT_RUN_CONFIG,
            raise_on_error=False,
        )
        return outcome(result)


def driver_reason(exc: BaseException) -> str:
    """The first line of the database driver's own error under ``exc`` (dagster-postgres wraps
    SQLAlchemy's, which wraps psycopg2's; libpq's messages hold no password)."""
    found: BaseException | None = exc
    while found is not None:
        orig = getattr(found, "orig", None)
        if isinstance(orig, BaseException):
            found = orig
            break
        if found.__cause__ is None:
            break
        found = found.__cause__
    text = str(found).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def outcome(result: dg.ExecuteInProcessResult) -> JobOutcome:
    return JobOutcome(
        success=result.success,
        run_id=result.run_id,
        error=first_error(result),
        failed_checks=tuple(failed_checks(result)),
    )


def initialize_pools(instance: dg.DagsterInstance, defs: dg.Definitions) -> list[str]:
    """Give every pool the assets declare its limit row before runs claim slots in it; returns
    the pools initialized now.

    Dagster writes a pool's row on the first claim; two runs claiming a new pool at the same
    moment on PostgreSQL collide on its unique key and one run fails. Done once, ahead of them
    (by any ``corpus`` command on a PostgreSQL instance, or by a deployment's first step), the
    claims only read it.
    """
    storage = instance.event_log_storage
    known = storage.get_concurrency_keys()
    pools = sorted({pool for node in defs.resolve_asset_graph().asset_nodes for pool in node.pools})
    fresh = [pool for pool in pools if pool not in known]
    for pool in fresh:
        storage.initialize_concurrency_limit_to_default(pool)
    return fresh
