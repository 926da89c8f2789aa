"""Prepare the Dagster home inside the corpus home (``dagster.yaml``), without importing Dagster.

Two instances are written. The embedded default keeps everything in SQLite files in the folder,
through ``pipelines.sqlite_storage.PooledSqliteStorage`` (Dagster's layout, its connections kept
open between operations; the file names the folder, and is written again when the folder moves).
The production instance (chosen by setting ``CORPUS_DAGSTER_POSTGRES_URL``) keeps runs, event
logs and schedules in PostgreSQL through ``dagster-postgres``: the file names the variable, never
its value, so no password is written. Its queued run coordinator lets runs of different
collections run side by side (``RUN_LIMITS``) and gives the pool of the generation-table writers
one slot (``POOL_LIMITS``), so those steps run one at a time across runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

MARKER = "# Written by corpus-index."
POSTGRES_URL_ENV = "CORPUS_DAGSTER_POSTGRES_URL"
EMBEDDED = f"{MARKER} The embedded default"
PRODUCTION = f"{MARKER} The production instance"

# Dagster's run monitoring (run by the daemon): a run whose process died (a killed `corpus
# sync`, a crashed `dagster dev`) otherwise stays STARTED forever and holds one of the queued
# coordinator's slots. The default run launcher cannot ask whether a run's process is alive,
# so a STARTED run is failed once it passes max_runtime_seconds; runs stuck STARTING or
# CANCELING are failed after their timeouts. Resuming needs a launcher that supports it.
RUN_MONITORING: dict[str, int] = {
    "start_timeout_seconds": 180,
    "cancel_timeout_seconds": 180,
    "max_runtime_seconds": 4 * 3600,
    "max_resume_run_attempts": 0,
    "poll_interval_seconds": 60,
}

DAGSTER_YAML = f"""\
{EMBEDDED}: a SQLite instance in this folder.
telemetry:
  enabled: false
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    max_concurrent_runs: 2
"""

STORAGE_MODULE = "pipelines.sqlite_storage"
STORAGE_CLASS = "PooledSqliteStorage"


def storage_yaml(dagster_home: Path) -> str:
    """The embedded instance's ``storage:`` block: Dagster's SQLite layout in ``dagster_home``
    (its absolute path), kept by :data:`STORAGE_CLASS`."""
    return (
        f"storage:\n  custom:\n    module: {STORAGE_MODULE}\n    class: {STORAGE_CLASS}\n"
        f"    config:\n      base_dir: {json.dumps(str(dagster_home.resolve()))}\n"
    )


def _with_storage(text: str, block: str) -> str:
    """``text`` (a ``dagster.yaml``) with its ``storage:`` block, if any, replaced by ``block``
    (appended where there is none)."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith("storage:")), None)
    if start is None:
        sep = "" if not text or text.endswith("\n") else "\n"
        return text + sep + block
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end].startswith(" ")):
        end += 1
    return "".join([*lines[:start], block, *lines[end:]])


# The production instance's run queue: a few runs at once, one run per partition key and one
# run of a collection's profile partitions (the steps of one collection's runs would only wait
# on each other's locks). An ingest run names its collection in another tag than those runs,
# so source_update_sensor, not the queue, holds its ingest back while one is in flight.
MAX_CONCURRENT_RUNS = 4
RUN_TAG_LIMITS: list[tuple[str, int]] = [
    ("dagster/partition", 1),
    ("dagster/partition/collection", 1),
]
# Every pool gets one slot: the one the assets declare is the generation-table writers'.
POOL_DEFAULT_LIMIT = 1


def _tag_limits_yaml() -> str:
    return "".join(
        f"      - key: {key}\n        value:\n          applyLimitPerUniqueValue: true\n"
        f"        limit: {limit}\n"
        for key, limit in RUN_TAG_LIMITS
    )


POSTGRES_DAGSTER_YAML = f"""\
{PRODUCTION}: runs, event logs and schedules in PostgreSQL
# (the URL is read from {POSTGRES_URL_ENV} when the instance loads).
telemetry:
  enabled: false
storage:
  postgres:
    postgres_url:
      env: {POSTGRES_URL_ENV}
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
concurrency:
  runs:
    max_concurrent_runs: {MAX_CONCURRENT_RUNS}
    tag_concurrency_limits:
{_tag_limits_yaml()}  pools:
    granularity: op
    default_limit: {POOL_DEFAULT_LIMIT}
"""


def run_monitoring_yaml(**overrides: int) -> str:
    """The ``run_monitoring:`` block of ``dagster.yaml``, with ``overrides`` of its defaults."""
    unknown = set(overrides) - set(RUN_MONITORING)
    if unknown:
        raise ValueError(f"unknown run_monitoring settings: {sorted(unknown)}")
    values = {**RUN_MONITORING, **overrides}
    return "run_monitoring:\n  enabled: true\n" + "".join(
        f"  {key}: {value}\n" for key, value in values.items()
    )


def prepare(dagster_home: Path, *, postgres: bool = False, **run_monitoring: int) -> Path:
    """Create the folder and a ``dagster.yaml`` if there is none; returns the folder.

    ``postgres``: the production instance (PostgreSQL storage, the URL from
    ``CORPUS_DAGSTER_POSTGRES_URL``), else the embedded default. A file this project wrote for
    the other variant is replaced (the SQLite files of the embedded one stay in the folder); a
    ``dagster.yaml`` this project wrote before run monitoring existed gets the
    ``run_monitoring:`` block appended, and an embedded one whose ``storage:`` block is not
    this folder's (written before it had one, or for the folder before it moved) gets it
    replaced; one written by hand (no marker line) is left alone. ``run_monitoring``
    overrides the defaults in a file written now (tests poll faster).
    """
    dagster_home.mkdir(parents=True, exist_ok=True)
    config = dagster_home / "dagster.yaml"
    wanted = PRODUCTION if postgres else EMBEDDED
    text = config.read_text(encoding="utf-8") if config.exists() else ""
    if not text or (text.startswith(MARKER) and not text.startswith(wanted)):
        body = POSTGRES_DAGSTER_YAML if postgres else DAGSTER_YAML + storage_yaml(dagster_home)
        config.write_text(body + run_monitoring_yaml(**run_monitoring), encoding="utf-8")
        return dagster_home
    if not text.startswith(MARKER):
        return dagster_home
    fixed = text
    if not any(line.startswith("run_monitoring:") for line in text.splitlines()):
        fixed += ("" if text.endswith("\n") else "\n") + run_monitoring_yaml()
    if not postgres:
        fixed = _with_storage(fixed, storage_yaml(dagster_home))
    if fixed != text:
        config.write_text(fixed, encoding="utf-8")
    return dagster_home


if __name__ == "__main__":
    import os

    prepare(
        Path(os.environ.get("DAGSTER_HOME") or sys.argv[1]),
        postgres=bool(os.environ.get(POSTGRES_URL_ENV)),
    )
