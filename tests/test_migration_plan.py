"""What ``corpus plan-migration`` counts: a grouped collection's groups' inputs too, and in
its totals what the backfill embeds (an input several collections hold, once)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import yaml
from click.testing import CliRunner

from corpus_index import lance, steps
from corpus_index.cache import OWNER_KEY, exact_table_name, folded_table_name
from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.home import Home
from corpus_index.migration import MigrationPlan, plan_migration
from tests.corpusgen import write_home
from tests.searchkit import build_home, messages_config


def _planned(config: Path, namespace: str) -> tuple[Home, MigrationPlan]:
    """The home of ``config`` built, then given profile ``wider`` (hash:v1-128, nothing in
    its cache) for ``namespace``; and the plan of its backfill."""
    home = build_home(Settings(config_path=config, home=config.parent / "home"))
    raw = yaml.safe_load(config.read_text())
    raw["profiles"]["wider"] = {"embedder": "hash:v1-128", "namespace": namespace}
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    home = Home(home.settings)
    return home, plan_migration(home, "wider")


def test_a_messages_collection_is_planned_with_its_group_rows(tmp_path: Path) -> None:
    home, plan = _planned(messages_config(tmp_path), "messages")
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


def test_the_totals_are_what_the_backfill_embeds(tmp_path: Path) -> None:
    """The embedding cache is shared by the collections: a text two of them hold (the same
    market summary in every deal) is embedded once, so the totals, the tokens a paid model
    bills included, count it once; each collection's row counts it as its own."""
    home, plan = _planned(write_home(tmp_path), "deals")
    assert plan.shared_inputs > 0
    assert sum(c.to_embed for c in plan.collections) == plan.to_embed + plan.shared_inputs
    base = ["--config", str(home.settings.config_path), "--home", str(home.settings.home)]
    shown = CliRunner().invoke(main, [*base, "plan-migration", "wider"])
    assert shown.exit_code == 0, shown.output
    assert f"the rows count {plan.shared_inputs} inputs more than the total" in shown.output
    embedded = tokens = 0
    for collection in home.config.collections:
        outcome = steps.embeddings.run(home, "wider", collection)
        embedded += outcome.embedded
        tokens += outcome.tokens
    assert (plan.to_embed, plan.tokens_to_embed) == (embedded, tokens)
    assert plan.inputs == plan.cache_hits + plan.to_embed


def _owner_recorded(home: Home, table: str) -> bool:
    field = lance.connect(home.settings.lance_uri).open_table(table).schema.field("vector")
    return OWNER_KEY.encode() in (field.metadata or {})


def test_planning_reads_an_old_cache_table_and_only_a_sync_records_its_owner(
    tmp_path: Path,
) -> None:
    """A home made before cache names were exact has its model's table under the slugs alone:
    `corpus plan-migration` reads it as its model's (the plan counts its vectors as hits) and
    writes nothing; the sync's embeddings step records the owner in the table."""
    home = build_home(Settings(config_path=write_home(tmp_path), home=tmp_path / "home"))
    spec = home.spec("main")
    db = lance.connect(home.settings.lance_uri)
    exact = exact_table_name(spec.backend_spec, spec.model_revision)
    folded = folded_table_name(spec.backend_spec, spec.model_revision)
    db.create_table(folded, data=db.open_table(exact).to_arrow())
    db.drop_table(exact)
    versions = db.open_table(folded).version

    shown = CliRunner().invoke(
        main,
        ["--config", str(home.settings.config_path), "--home", str(home.settings.home)]
        + ["plan-migration", "main", "--json"],
    )
    assert shown.exit_code == 0, shown.output
    planned = plan_migration(Home(home.settings), "main")
    assert planned.inputs == planned.cache_hits > 0 and planned.to_embed == 0
    assert lance.connect(home.settings.lance_uri).open_table(folded).version == versions
    assert not _owner_recorded(home, folded)

    for collection in home.config.collections:
        outcome = steps.embeddings.run(Home(home.settings), "main", collection)
        assert outcome.embedded == 0
    assert _owner_recorded(home, folded)
    assert exact not in lance.table_names(lance.connect(home.settings.lance_uri))
