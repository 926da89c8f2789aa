"""The Dagster instance config the project writes: run monitoring on, for new and old homes."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml

from corpus_index.dagster_home import DAGSTER_YAML, RUN_MONITORING, prepare


def monitoring_of(home: Path) -> dict[str, object]:
    data = yaml.safe_load((home / "dagster.yaml").read_text(encoding="utf-8"))
    return dict(data["run_monitoring"])


def test_a_new_home_enables_run_monitoring(tmp_path: Path) -> None:
    home = prepare(tmp_path / "dagster")
    assert monitoring_of(home) == {"enabled": True, **RUN_MONITORING}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_max_runtime_seconds == RUN_MONITORING["max_runtime_seconds"]


def test_an_old_home_written_by_the_project_gets_the_block_once(tmp_path: Path) -> None:
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text(DAGSTER_YAML, encoding="utf-8")
    prepare(home)
    prepare(home)
    text = (home / "dagster.yaml").read_text(encoding="utf-8")
    assert text.count("run_monitoring:") == 1
    assert monitoring_of(home)["enabled"] is True


def test_a_hand_written_dagster_yaml_is_left_alone(tmp_path: Path) -> None:
    home = tmp_path / "dagster"
    home.mkdir()
    own = "telemetry:\n  enabled: false\n"
    (home / "dagster.yaml").write_text(own, encoding="utf-8")
    prepare(home)
    assert (home / "dagster.yaml").read_text(encoding="utf-8") == own


def test_overrides_apply_to_a_new_file(tmp_path: Path) -> None:
    home = prepare(tmp_path / "dagster", poll_interval_seconds=2, max_runtime_seconds=5)
    assert monitoring_of(home)["poll_interval_seconds"] == 2
    assert monitoring_of(home)["max_runtime_seconds"] == 5
