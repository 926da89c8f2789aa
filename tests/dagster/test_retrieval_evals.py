"""`retrieval_evals` is materialized when evaluations exist (issue 16): a sync that leaves
golden-set metrics in the registry shows them in the asset (which a sync never leaves
missing), and a sync with nothing new to show does not materialize it again."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from corpus_index.config import Settings
from definitions import dagster_runner
from tests.corpusgen import write_home
from tests.dagster.test_migration import configure, golden_set


def materializations(instance: dg.DagsterInstance) -> list[dict[str, object]]:
    records = instance.fetch_materializations(dg.AssetKey("retrieval_evals"), limit=100).records
    return [
        {k: getattr(v, "value", v) for k, v in r.asset_materialization.metadata.items()}  # type: ignore[union-attr]
        for r in records
    ]


def test_a_sync_shows_new_evaluations_in_retrieval_evals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_home(tmp_path)
    settings = Settings(config_path=config, home=tmp_path / "home")
    monkeypatch.setenv("DAGSTER_HOME", str(settings.dagster_home))  # restored after the test
    runner = dagster_runner()
    assert runner.sync(settings).ok  # no golden set, no `corpus eval`: nothing to show yet
    instance = runner.open_home(settings).instance
    (empty,) = materializations(instance)
    assert empty["evaluations"] == 0 and empty["results"] == "no evals yet"

    golden_set(tmp_path)
    configure(config, remote=None, eval_gate=False)  # the namespace gets a golden set
    deal = tmp_path / "sources" / "alpha" / "deal-alpha-000.uw.md"
    deal.write_text(deal.read_text().replace("Phoenix", "Tucson"))  # the generation rebuilds
    assert runner.sync(settings).ok
    shown, _ = materializations(instance)  # newest first
    assert shown["evaluations"] == 1 and shown["runs"] == 0
    assert "| golden:deals | hybrid | g0001 |" in str(shown["results"])
    assert (settings.home / "reports" / "retrieval-evals.png").is_file()

    assert runner.sync(settings).ok  # the same figures: not materialized again
    assert len(materializations(instance)) == 2
