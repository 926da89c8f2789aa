"""The Dagster instance config the project writes: run monitoring on, for new and old homes;
the embedded instance's pooled SQLite storage in its own folder; the production (PostgreSQL)
variant and the settings that choose it."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from corpus_index.dagster_home import (
    DAGSTER_YAML,
    MAX_CONCURRENT_RUNS,
    POSTGRES_URL_ENV,
    RUN_MONITORING,
    RUN_TAG_LIMITS,
    STORAGE_CLASS,
    STORAGE_MODULE,
    prepare,
    run_monitoring_yaml,
)
from corpus_index.environment import configure_environment
from corpus_index.errors import ConfigError


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


@dg.op
def one() -> int:
    return 1


@dg.job
def tiny() -> None:
    one()


def storage_of(home: Path) -> dict[str, object]:
    """The ``storage:`` block the embedded instance of ``home`` should have."""
    config = {"base_dir": str(home.resolve())}
    return {"custom": {"module": STORAGE_MODULE, "class": STORAGE_CLASS, "config": config}}


def test_the_embedded_instance_keeps_its_runs_in_this_folder_through_the_pooled_storage(
    tmp_path: Path,
) -> None:
    """The storage block names the pooled SQLite storage and this folder; an instance loads it,
    and a run it executes is found again by an instance loaded afresh (the same files)."""
    home = prepare(tmp_path / "dagster")
    assert yaml.safe_load((home / "dagster.yaml").read_text(encoding="utf-8"))["storage"] == (
        storage_of(home)
    )
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PooledSqliteRunStorage"
        assert type(instance.event_log_storage).__name__ == "PooledSqliteEventLogStorage"
        run_id = tiny.execute_in_process(instance=instance).run_id
    assert (home / "history" / "runs.db").is_file()
    assert (home / "history" / "runs" / f"{run_id}.db").is_file()
    with dg.DagsterInstance.from_config(str(home)) as again:
        run = again.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
        assert any(e.step_key == "one" for e in again.all_logs(run_id))


def test_a_wiped_instance_records_runs_again(tmp_path: Path) -> None:
    """Wiping removes the run files and empties the index while this process keeps
    connections to them: the runs after it are recorded, and are the only ones found."""
    home = prepare(tmp_path / "dagster")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        before = tiny.execute_in_process(instance=instance).run_id
        instance.wipe()
        assert not (home / "history" / "runs" / f"{before}.db").exists()
        after = tiny.execute_in_process(instance=instance).run_id
        assert any(e.step_key == "one" for e in instance.all_logs(after))
    with dg.DagsterInstance.from_config(str(home)) as again:
        assert any(e.step_key == "one" for e in again.all_logs(after))
        assert [r.run_id for r in again.get_runs()] == [after]


def test_an_old_embedded_file_or_a_moved_folder_gets_this_folders_storage_block(
    tmp_path: Path,
) -> None:
    """A file the project wrote before the storage block (Dagster's default storage, the same
    files) gets it, once; a folder moved elsewhere has the block name its new place, and
    what else the file says stays."""
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text(DAGSTER_YAML + run_monitoring_yaml(), encoding="utf-8")
    prepare(home)
    prepare(home)
    text = (home / "dagster.yaml").read_text(encoding="utf-8")
    assert text.count("storage:") == 1 and yaml.safe_load(text)["storage"] == storage_of(home)
    moved = home.rename(tmp_path / "elsewhere")
    prepare(moved)
    data = yaml.safe_load((moved / "dagster.yaml").read_text(encoding="utf-8"))
    assert data["storage"] == storage_of(moved)
    assert data["run_monitoring"] == {"enabled": True, **RUN_MONITORING}
    assert data["run_coordinator"]["class"] == "QueuedRunCoordinator"


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


def test_the_production_instance_names_the_url_variable_and_its_limits(tmp_path: Path) -> None:
    home = prepare(tmp_path / "dagster", postgres=True)
    data = yaml.safe_load((home / "dagster.yaml").read_text(encoding="utf-8"))
    assert data["storage"] == {"postgres": {"postgres_url": {"env": POSTGRES_URL_ENV}}}
    assert data["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert "config" not in data["run_coordinator"]  # the limits are under concurrency: runs
    runs = data["concurrency"]["runs"]
    assert runs["max_concurrent_runs"] == MAX_CONCURRENT_RUNS
    assert [(t["key"], t["limit"]) for t in runs["tag_concurrency_limits"]] == RUN_TAG_LIMITS
    assert data["concurrency"]["pools"] == {"granularity": "op", "default_limit": 1}
    assert data["run_monitoring"]["enabled"] is True


def test_a_file_the_project_wrote_follows_the_variant_asked_for(tmp_path: Path) -> None:
    home = prepare(tmp_path / "dagster")
    prepare(home, postgres=True)
    assert "storage" in yaml.safe_load((home / "dagster.yaml").read_text(encoding="utf-8"))
    prepare(home, postgres=True)  # asked again: unchanged
    prepare(home)
    text = (home / "dagster.yaml").read_text(encoding="utf-8")
    assert yaml.safe_load(text)["storage"] == storage_of(home)
    assert text.count("run_monitoring:") == 1


def test_a_hand_written_dagster_yaml_is_left_alone_for_postgres_too(tmp_path: Path) -> None:
    home = tmp_path / "dagster"
    home.mkdir()
    own = "telemetry:\n  enabled: false\n"
    (home / "dagster.yaml").write_text(own, encoding="utf-8")
    prepare(home, postgres=True)
    assert (home / "dagster.yaml").read_text(encoding="utf-8") == own


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"CORPUS_EXECUTOR": "threads"}, "CORPUS_EXECUTOR='threads' is not an executor"),
        (
            {POSTGRES_URL_ENV: "postgresql://dagster@db:5432/dagster"},
            f"{POSTGRES_URL_ENV} must start with postgresql+psycopg2:// (found postgresql)",
        ),
        ({POSTGRES_URL_ENV: "db:5432"}, "(found no scheme)"),
    ],
)
def test_bad_dagster_settings_are_named(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        configure_environment(dict(environ))
    assert message in str(info.value)


def test_the_environment_chooses_the_instance_and_the_executor() -> None:
    assert configure_environment({}).dagster_postgres is False
    assert configure_environment({}).executor == "in_process"
    env = configure_environment(
        {POSTGRES_URL_ENV: "postgresql+psycopg2://d:pw@db/d", "CORPUS_EXECUTOR": "multiprocess"}
    )
    assert env.dagster_postgres and env.executor == "multiprocess"
    assert env.dagster_postgres_location == "postgresql+psycopg2://d:***@db/d"  # for messages
