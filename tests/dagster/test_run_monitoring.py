"""A run whose process was killed is failed by the daemon's run monitoring, freeing its slot.

A `corpus sync` killed with SIGKILL leaves its in-process run STARTED: nothing is left to
report its end, and the queued run coordinator counts it against ``max_concurrent_runs``.
With the ``run_monitoring`` the project writes into ``dagster.yaml``, the daemon fails it once
it passes ``max_runtime_seconds`` (a few seconds in this test's instance).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from corpus_index.config import Settings
from corpus_index.dagster_home import prepare
from pipelines.devserver import ROOT, dagster_dev
from tests.corpusgen import write_home

pytestmark = [pytest.mark.slow, pytest.mark.daemon]
LIMIT_S = 240  # a failure detector: a loaded CI machine (three workers on two cores) is slow

SYNC = """
import sys
from pathlib import Path
from corpus_index.config import Settings
from definitions import dagster_runner
dagster_runner().sync(Settings(config_path=Path(sys.argv[1]), home=Path(sys.argv[2])))
"""


def started_run(instance: dg.DagsterInstance, proc: subprocess.Popen[bytes]) -> str:
    t0 = time.monotonic()
    while time.monotonic() - t0 < LIMIT_S:
        records = instance.get_run_records(
            filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])
        )
        if records:
            return records[0].dagster_run.run_id
        if proc.poll() is not None:
            raise AssertionError(f"the sync ended ({proc.returncode}) before a run was seen")
        time.sleep(0.2)
    raise AssertionError(f"no STARTED run within {LIMIT_S} s")


def test_a_killed_run_is_failed_by_run_monitoring(tmp_path: Path) -> None:
    config_path = write_home(tmp_path)
    settings = Settings(config_path=config_path, home=tmp_path / "home")
    dagster_home = prepare(settings.dagster_home, poll_interval_seconds=2, max_runtime_seconds=5)
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(  # noqa: S603 - fixed arguments
        [sys.executable, "-c", SYNC, str(config_path), str(settings.home)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        try:
            run_id = started_run(instance, proc)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTED  # type: ignore[union-attr]
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
