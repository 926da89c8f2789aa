"""Failed runs alert where an operator looks (issue 16): a blocking check that fails inside a
run the automation started is recorded by run_failure_alert_sensor and listed by
`corpus alerts` until acknowledged."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import numpy as np
import pytest
from click.testing import CliRunner

from assets import CorpusResource
from assets.graph import _results
from corpus_index.alerts import alerts
from corpus_index.cache import EmbeddingCache
from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.gates import Gate
from corpus_index.home import Home
from pipelines.alerts import alert_for_run, run_failure_alert_sensor
from pipelines.sync import failed_checks
from tests.corpusgen import write_home
from tests.dagster.harness import QUIET, Graph

CHECK = "embeddings:vector_norms_match_profile"
# the cache entry is not what the model gives for its input either: the check that embeds a
# few cache hits again fails on it too
CHECKS = [CHECK, "embeddings:vectors_share_one_backend_spec"]


def corrupt_one_cached_vector(settings: Settings, collection: str) -> None:
    """A cache entry off the profile's unit norm: the blocking norm check fails on it (and the
    producer check, which embeds it again: with one input's entry of a handful, it is among
    the cache hits embedded again)."""
    home = Home(settings)
    inputs = home.warehouse.read("embedding_inputs", (collection,))
    assert inputs is not None
    spec = home.spec("main")
    cache = EmbeddingCache(
        settings.lance_uri,
        backend_spec=spec.backend_spec,
        revision=spec.model_revision,
        dim=spec.dim,
    )
    cache.put(
        sorted(set(inputs["input_hash"].to_pylist()))[:1], np.full((1, spec.dim), 3.0, np.float32)
    )


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(config_path=write_home(tmp_path), home=tmp_path / "home")


def test_a_failed_blocking_check_in_an_automation_run_is_an_alert(settings: Settings) -> None:
    g = Graph(settings)
    assert g.ingest("alpha-deals").success
    corrupt_one_cached_vector(settings, "alpha-deals")
    key = dg.MultiPartitionKey({"profile": "main", "collection": "alpha-deals"})
    # the run the automation sensor would launch for the updated inputs
    result = g.defs.resolve_job_def("embed_job").execute_in_process(
        partition_key=key, instance=g.instance, run_config=QUIET, raise_on_error=False
    )
    assert not result.success
    run = g.instance.get_run_by_id(result.run_id)
    failure = next(e for e in result.all_events if e.event_type == dg.DagsterEventType.RUN_FAILURE)
    with dg.build_run_status_sensor_context(
        sensor_name="run_failure_alert_sensor",
        dagster_instance=g.instance,
        dagster_run=run,  # type: ignore[arg-type]
        dagster_event=failure,
        resources={
            "corpus": CorpusResource(config_path=str(settings.config_path), home=str(settings.home))
        },
    ) as context:
        assert alerts(settings.home) == []
        run_failure_alert_sensor(context.for_run_failure())
        # a second tick over the same run records nothing new
        run_failure_alert_sensor(context.for_run_failure())
    (alert,) = alerts(settings.home)
    assert alert.run_id == result.run_id and alert.job == "embed_job"
    assert alert.partition == str(key)
    assert [c.split("[")[0] for c in alert.failed_checks] == CHECKS
    assert "embeddings" in alert.failed_steps and alert.failed_at
    assert alert.error.startswith("2 blocking asset checks failed")

    base = ["--config", str(settings.config_path), "--home", str(settings.home)]
    listed = CliRunner().invoke(main, [*base, "alerts"])
    assert listed.exit_code == 1  # an unacknowledged alert is a failure for a monitoring script
    assert f"embed_job [{key}]" in listed.output and CHECK in listed.output
    assert result.run_id[:8] in listed.output
    status = CliRunner().invoke(main, [*base, "generations"])  # where an operator looks
    assert "1 unacknowledged alert(s)" in status.output and result.run_id[:8] in status.output
    acked = CliRunner().invoke(main, [*base, "alerts", "--ack", result.run_id[:8]])
    assert acked.exit_code == 0 and "acknowledged 1" in acked.output
    quiet = CliRunner().invoke(main, [*base, "alerts"])
    assert quiet.exit_code == 0 and "no unacknowledged alerts" in quiet.output
    assert "alert" not in CliRunner().invoke(main, [*base, "generations"]).output
    assert len(alerts(settings.home, unacknowledged=False)) == 1


def test_a_sync_records_its_failed_runs_as_alerts(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(settings.dagster_home))  # restored after the test
    assert Graph(settings).ingest("alpha-deals").success  # so the inputs' hashes are known
    corrupt_one_cached_vector(settings, "alpha-deals")
    base = ["--config", str(settings.config_path), "--home", str(settings.home)]
    synced = CliRunner().invoke(main, [*base, "sync"])
    assert synced.exit_code == 1
    by_job = {(a.job, a.partition): a for a in alerts(settings.home)}
    alert = by_job[("embed_job", "alpha-deals|main")]
    assert [c.split("[")[0] for c in alert.failed_checks] == CHECKS


def test_a_check_that_did_not_run_is_not_named_failed() -> None:
    """A gate with nothing to judge (the eval gate of a namespace without a golden set) is
    recorded not passed, as a NOT RUN warning: the alert of a run that failed beside it names
    only what failed, and so does a sync's report."""

    @dg.asset(
        check_specs=[
            dg.AssetCheckSpec("judged", asset="gated", blocking=True),
            dg.AssetCheckSpec("unjudged", asset="gated", blocking=True),
        ]
    )
    def gated() -> dg.MaterializeResult:
        return dg.MaterializeResult(
            check_results=_results(
                [
                    Gate("judged", False, "a check that ran and failed"),
                    Gate.not_run("unjudged", "a check with nothing to judge", "no golden set"),
                ]
            )
        )

    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([gated], instance=instance, raise_on_error=False)
    assert not result.success  # the failed blocking check fails the run
    assert failed_checks(result) == ["gated:judged"]
    run = instance.get_run_by_id(result.run_id)
    assert run is not None
    alert = alert_for_run(instance, run)
    assert alert.failed_checks == ("gated:judged",)
    assert "unjudged" not in alert.summary()
