"""What the UI's launchpad offers (issue 16): retire_generation_job offers the registry's
generations to choose from, and the rollback and promote jobs, launched with the config they
come with, roll back and move nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg

from corpus_index.config import Settings
from corpus_index.home import Home
from corpus_index.lifecycle import promote
from corpus_index.registry import Registry
from definitions import build_definitions
from tests.corpusgen import write_home
from tests.dagster.harness import Graph

PROFILES = {
    "ctx": {"embedder": "hash:v1-32", "input_format": "default-v2", "namespace": "deals"},
    "wide": {"embedder": "hash:v1-16", "namespace": "deals"},
}


def retire_field(defs: dg.Definitions) -> Any:
    """The config type of retire_generation_job's ``generation``, as the launchpad gets it."""
    schema = defs.resolve_job_def("retire_generation_job").run_config_schema.config_type
    op = schema.fields["ops"].config_type.fields["retire_generation"].config_type
    return op.fields["config"].config_type.fields["generation"].config_type


def test_retire_offers_the_registrys_generations(tmp_path: Path) -> None:
    settings = Settings(
        config_path=write_home(tmp_path, extra_profiles=PROFILES), home=tmp_path / "home"
    )
    # before anything is built there is nothing to choose from: a text field
    assert not hasattr(retire_field(build_definitions(settings)), "enum_values")
    Graph(settings).build_all()
    reg = Registry(settings.registry_path)
    main, ctx, wide = (g.id for g in reg.generations(namespace="deals"))
    promote(Home(settings), "deals", main)
    promote(Home(settings), "deals", ctx)  # main is now the rollback target
    field = retire_field(build_definitions(settings))  # the code location reloaded
    choices = {v.config_value: v.description for v in field.enum_values}
    assert list(choices) == [wide, ctx, main]  # what can be retired first
    assert choices[wide].startswith("READY, deals/wide")
    assert "refused while it serves" in choices[ctx]
    assert "the rollback target" in choices[main]


def test_the_rollback_and_promote_jobs_defaults_roll_back_and_move_nothing(
    tmp_path: Path,
) -> None:
    settings = Settings(
        config_path=write_home(tmp_path, extra_profiles={"ctx": PROFILES["ctx"]}),
        home=tmp_path / "home",
    )
    g = Graph(settings)
    g.build_all()
    reg = Registry(settings.registry_path)
    main, ctx = (x.id for x in reg.generations(namespace="deals"))
    promote(Home(settings), "deals", main)
    promote(Home(settings), "deals", ctx)

    def launch(job: str) -> dg.ExecuteInProcessResult:
        # the config the launchpad fills in for the partition, unchanged (no run config given)
        return g.defs.resolve_job_def(job).execute_in_process(
            partition_key="deals", instance=g.instance, raise_on_error=False
        )

    rollback = g.defs.resolve_job_def("rollback_generation_job").partitioned_config
    assert rollback is not None
    filled = rollback.get_run_config_for_partition_key("deals")["ops"]["active_generation"]
    assert filled["config"]["action"] == "rollback" and not filled["config"]["generation"]
    assert launch("promote_generation_job").success
    assert reg.active("deals").id == ctx  # type: ignore[union-attr]  # recorded, not moved
    assert launch("rollback_generation_job").success
    assert reg.active("deals").id == main  # type: ignore[union-attr]
