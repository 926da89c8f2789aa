"""The automation builds a profile's generation again after its index rows change, although
the profile covers only some collections (the other profile x collection partitions of
``index_rows`` are never materialized, which "any dependency missing" took for missing)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml

from corpus_index.config import Settings
from tests.corpusgen import write_home
from tests.dagster.harness import Graph


def test_a_profile_covering_some_collections_is_rebuilt_by_the_automation(
    tmp_path: Path,
) -> None:
    config_path = write_home(tmp_path, deals_per_tenant=1)
    config = yaml.safe_load(config_path.read_text())
    config["collections"]["beta-deals"]["namespace"] = "other"
    config["namespaces"]["other"] = {"eval_gate": "off"}
    config["profiles"]["other"] = {**config["profiles"]["main"], "namespace": "other"}
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    g = Graph(Settings(config_path=config_path, home=tmp_path / "home"))
    assert not g.config.profile_covers("other", "alpha-deals")
    g.build_all()
    first = dg.evaluate_automation_conditions(defs=g.defs, instance=g.instance)
    assert first.total_requested == 0
    deal = tmp_path / "sources" / "beta" / "deal-beta-000.uw.md"
    deal.write_text(deal.read_text().replace("Rents grew", "Rents fell"))
    assert g.ingest("beta-deals").success and g.embed("other", "beta-deals").success
    after = dg.evaluate_automation_conditions(defs=g.defs, instance=g.instance, cursor=first.cursor)
    requested = {
        (key.to_user_string(), partition)
        for result in after.results
        for key in [result.key]
        for partition in (result.true_subset.expensively_compute_partition_keys() or [])
        if result.true_subset.size
    }
    assert ("index_generation", "other") in requested, requested
    assert ("index_generation", "main") not in requested
