"""Prepare the Dagster home inside the corpus home (``dagster.yaml``), without importing Dagster."""

from __future__ import annotations

import sys
from pathlib import Path

DAGSTER_YAML = """\
# Written by corpus-index. The embedded default: a SQLite instance in this folder.
telemetry:
  enabled: false
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    max_concurrent_runs: 2
"""


def prepare(dagster_home: Path) -> Path:
    """Create the folder and a ``dagster.yaml`` if there is none; returns the folder."""
    dagster_home.mkdir(parents=True, exist_ok=True)
    config = dagster_home / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML, encoding="utf-8")
    return dagster_home


if __name__ == "__main__":
    import os

    prepare(Path(os.environ.get("DAGSTER_HOME") or sys.argv[1]))
