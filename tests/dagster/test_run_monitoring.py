"""A run whose process was killed is failed by the daemon's run monitoring, freeing its slot.

A `corpus sync` killed with SIGKILL leaves its in-process run STARTED: nothing is left to
report its end, and the queued run coordinator counts it against ``max_concurrent_runs``.
With the ``run_monitoring`` the project writes into ``dagster.yaml``, the daemon fails it once
it passes ``max_runtime_seconds`` (a few seconds in this test's instance). A run of this host
whose `corpus` process is gone is failed sooner by ``orphaned_run_sensor``
(``test_orphaned_runs.py``); run monitoring is what fails the runs of other hosts.
"""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import pytest

from corpus_index.config import Settings
from corpus_index.dagster_home import prepare
from pipelines.devserver import dagster_dev
from pipelines.orphans import PROCESS_TAG
from tests.corpusgen import write_home
from tests.dagster.killed import LIMIT_S, killed_sync

pytestmark = [pytest.mark.slow, pytest.mark.daemon]


def test_a_killed_run_is_failed_by_run_monitoring(tmp_path: Path) -> None:
    config_path = write_home(tmp_path)
    settings = Settings(config_path=config_path, home=tmp_path / "home")
    dagster_home = prepare(settings.dagster_home, poll_interval_seconds=2, max_runtime_seconds=5)
    run_id, _ = killed_sync(settings, dagster_home)
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        # a run another host executed: orphaned_run_sensor leaves it to run monitoring
        instance.add_run_tags(run_id, {PROCESS_TAG: "elsewhere.example 1 1"})
        with dagster_dev(settings, sensor_interval_s=600) as server:
            t0 = time.monotonic()
            while time.monotonic() - t0 < LIMIT_S:
                run = instance.get_run_by_id(run_id)
                assert run is not None
                if run.status == dg.DagsterRunStatus.FAILURE:
                    break
                time.sleep(1.0)
            else:
                tail = server.log.read_text(errors="replace")[-3000:]
                raise AssertionError(f"run {run_id} still {run.status} after {LIMIT_S} s\n{tail}")
    print(f"failed by run monitoring {time.monotonic() - t0:.1f} s after the daemon started")
