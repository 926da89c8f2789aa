"""With the real daemon (`dagster dev`), a failed run of the home's instance becomes an alert
by itself: run_failure_alert_sensor runs by default and sees `corpus` runs too (issue 16)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from corpus_index.alerts import alerts
from corpus_index.config import Settings
from definitions import dagster_runner
from pipelines.devserver import dagster_dev
from tests.corpusgen import write_home

pytestmark = [pytest.mark.slow, pytest.mark.daemon]
LIMIT_S = 240  # a failure detector: a loaded CI machine (three workers on two cores) is slow


def test_the_daemon_records_a_failed_run_as_an_alert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(config_path=write_home(tmp_path), home=tmp_path / "home")
    monkeypatch.setenv("DAGSTER_HOME", str(settings.dagster_home))  # restored after the test
    runner = dagster_runner()
    assert runner.sync(settings).ok
    with dagster_dev(settings, sensor_interval_s=5) as server:
        t0 = time.monotonic()
        failed: list[str] = []
        while time.monotonic() - t0 < LIMIT_S:
            # a promotion of a generation that does not exist: its run fails (the sensor's
            # first tick only sets its cursor, so a run may fail before it watches)
            outcome = runner.promote(settings, "deals", "g9999")
            assert not outcome.success and outcome.run_id
            failed.append(outcome.run_id)
            time.sleep(5)
            if any(a.run_id in failed for a in alerts(settings.home)):
                break
        else:
            tail = server.log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"no alert within {LIMIT_S} s\n{tail}")
    alert = next(a for a in alerts(settings.home) if a.run_id in failed)
    assert alert.job == "promote_generation_job" and alert.partition == "deals"
    assert "g9999" in alert.error, alert
    print(f"alerted {time.monotonic() - t0:.1f} s after the daemon answered")
