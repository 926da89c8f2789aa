"""What ``corpus plan-migration`` counts for a grouped collection: its groups' inputs too."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import yaml

from corpus_index.config import Settings
from corpus_index.home import Home
from corpus_index.migration import plan_migration
from tests.searchkit import build_home, messages_config


def test_a_messages_collection_is_planned_with_its_group_rows(tmp_path: Path) -> None:
    config = messages_config(tmp_path)
    home = build_home(Settings(config_path=config, home=tmp_path / "home"))
    raw = yaml.safe_load(config.read_text())
    raw["profiles"]["wider"] = {"embedder": "hash:v1-128", "namespace": "messages"}
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    home = Home(home.settings)
    plan = plan_migration(home, "wider")
    assert plan.collections
    for entry in plan.collections:
        inputs = home.warehouse.read("embedding_inputs", (entry.collection,))
        assert inputs is not None
        groups = int(pc.sum(pc.equal(inputs["input_format"], "group-v1")).as_py() or 0)
        assert groups > 0
        assert entry.inputs == inputs.num_rows  # the units' and the groups'
        assert entry.to_embed == entry.distinct_inputs  # nothing in this model's cache yet
    generation = home.registry.active("messages")
    assert generation is not None
    assert sum(e.inputs for e in plan.collections) == home.store.count(generation)
