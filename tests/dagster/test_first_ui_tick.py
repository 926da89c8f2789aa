"""The first `make ui` after `make run` re-runs nothing (issue 16): the sensors the daemon
starts on the home's instance find that `corpus sync` already built every partition."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from assets import CorpusResource
from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.dagster_home import prepare
from definitions import build_definitions
from pipelines.sensors import source_update_sensor
from tests.corpusgen import write_home


def first_tick(settings: Settings, instance: dg.DagsterInstance) -> dg.SensorResult:
    """source_update_sensor's first tick on ``instance`` (no cursor, as in a new daemon)."""
    resource = CorpusResource(config_path=str(settings.config_path), home=str(settings.home))
    with dg.build_sensor_context(
        instance=instance, cursor=None, resources={"corpus": resource}
    ) as context:
        result = source_update_sensor(context)
    assert isinstance(result, dg.SensorResult)
    return result


def test_after_a_cli_sync_the_daemons_first_ticks_request_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_home(tmp_path)
    settings = Settings(config_path=config, home=tmp_path / "home")
    monkeypatch.setenv("DAGSTER_HOME", str(prepare(settings.dagster_home)))  # restored after
    base = ["--config", str(config), "--home", str(settings.home)]
    result = CliRunner().invoke(main, [*base, "sync", "--json"])
    assert result.exit_code == 0, result.output

    # the instance `make ui` opens: <home>/dagster, where the CLI's runs are
    with dg.DagsterInstance.from_config(str(settings.dagster_home)) as instance:
        tick = first_tick(settings, instance)
        assert list(tick.run_requests or []) == []
        assert not tick.dynamic_partitions_requests
        defs = build_definitions(settings)
        automation = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        assert automation.total_requested == 0

        # a change made while no daemon watched is still picked up, for its collection only
        deal = tmp_path / "sources" / "beta" / "deal-beta-000.uw.md"
        deal.write_text(deal.read_text().replace("Rents grew", "Rents fell"))
        changed = first_tick(settings, instance)
        assert [(r.job_name, r.partition_key) for r in changed.run_requests or []] == [
            ("ingest_job", "beta-deals")
        ]
