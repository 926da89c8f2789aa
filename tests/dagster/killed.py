"""A `corpus sync` killed (SIGKILL) while one of its runs is STARTED, as a crash leaves it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg

from corpus_index.config import Settings
from pipelines.devserver import ROOT

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


def killed_sync(settings: Settings, dagster_home: Path) -> tuple[str, int]:
    """A `corpus sync` of ``settings`` in a process of its own (its Dagster instance in
    ``dagster_home``), killed while one of its runs is STARTED: that run's id (still STARTED)
    and the process's pid."""
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(  # noqa: S603 - fixed arguments
        [sys.executable, "-c", SYNC, str(settings.config_path), str(settings.home)],
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
        run = instance.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.STARTED
    return run_id, proc.pid
