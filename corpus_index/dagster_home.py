"""Prepare the Dagster home inside the corpus home (``dagster.yaml``), without importing Dagster."""

from __future__ import annotations

import sys
from pathlib import Path

MARKER = "# Written by corpus-index."

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
{MARKER} The embedded default: a SQLite instance in this folder.
telemetry:
  enabled: false
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    max_concurrent_runs: 2
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


def prepare(dagster_home: Path, **run_monitoring: int) -> Path:
    """Create the folder and a ``dagster.yaml`` if there is none; returns the folder.

    A ``dagster.yaml`` this project wrote before run monitoring existed gets the
    ``run_monitoring:`` block appended; one written by hand (no marker line) is left alone.
    ``run_monitoring`` overrides the defaults in a file written now (tests poll faster).
    """
    dagster_home.mkdir(parents=True, exist_ok=True)
    config = dagster_home / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML + run_monitoring_yaml(**run_monitoring), encoding="utf-8")
        return dagster_home
    text = config.read_text(encoding="utf-8")
    has_block = any(line.startswith("run_monitoring:") for line in text.splitlines())
    if text.startswith(MARKER) and not has_block:
        sep = "" if text.endswith("\n") else "\n"
        config.write_text(text + sep + run_monitoring_yaml(), encoding="utf-8")
    return dagster_home


if __name__ == "__main__":
    import os

    prepare(Path(os.environ.get("DAGSTER_HOME") or sys.argv[1]))
