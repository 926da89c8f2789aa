"""Operating from the UI (issue 16): what "Materialize all" and the launchpad can and cannot do
to the serving pointer, what a migration backfill must build, and what the operator sees."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from corpus_index.config import Settings
from corpus_index.gates import EVAL_GATE
from corpus_index.home import Home
from corpus_index.lifecycle import promote
from corpus_index.migration import plan_migration
from corpus_index.registry import Registry
from tests.corpusgen import write_home
from tests.dagster.harness import QUIET, Graph, metadata
from tests.dagster.test_migration import configure, golden_set

CTX = {"embedder": "hash:v1-32", "input_format": "default-v2", "namespace": "deals"}


@pytest.fixture
def two_profiles(tmp_path: Path) -> Settings:
    """``main`` and ``ctx`` (another input format) in namespace ``deals``, both built."""
    config = write_home(tmp_path, extra_profiles={"ctx": CTX})
    settings = Settings(config_path=config, home=tmp_path / "home")
    Graph(settings).build_all()
    return settings


def _active_generation(g: Graph, config: dict[str, str] | None) -> dg.ExecuteInProcessResult:
    run_config: dict[str, object] = dict(QUIET)
    if config is not None:
        run_config["ops"] = {"active_generation": {"config": config}}
    return dg.materialize(
        g.defs.assets,  # type: ignore[arg-type]
        selection=["active_generation"],
        partition_key="deals",
        instance=g.instance,
        resources=g.defs.resources,
        run_config=run_config,
        raise_on_error=False,
    )


def test_materializing_active_generation_unasked_moves_nothing(two_profiles: Settings) -> None:
    registry = Registry(two_profiles.registry_path)
    main, ctx = registry.generations(namespace="deals")
    assert main.status == ctx.status == "READY"
    promote(Home(two_profiles), "deals", main.id)  # the operator chose main (or rolled back)
    g = Graph(two_profiles)
    for config in (None, {"generation": "", "action": "record"}):
        r = _active_generation(g, config)  # "Materialize all", or the launchpad's defaults
        assert r.success
        active = registry.active("deals")
        assert active is not None and active.id == main.id  # the newer READY ctx did not move in
        md = metadata(r, "active_generation")
        assert md["generation"] == main.id and md["moved"] is False
        table = str(md["generations"])
        assert f"| {main.id} | main | ACTIVE | **serving** |" in table
        assert f"| {ctx.id} | ctx | READY |  |" in table
    # promote without naming a generation is refused, naming what to do
    r = _active_generation(g, {"action": "promote"})
    assert not r.success
    assert registry.active("deals").id == main.id  # type: ignore[union-attr]
    # naming it promotes it
    r = _active_generation(g, {"generation": ctx.id})
    assert r.success and metadata(r, "active_generation")["moved"] is True
    assert registry.active("deals").id == ctx.id  # type: ignore[union-attr]
    r = _active_generation(g, {"action": "rollback"})
    assert r.success and registry.active("deals").id == main.id  # type: ignore[union-attr]


def test_a_generation_with_live_documents_but_no_rows_fails_its_checks(tmp_path: Path) -> None:
    config = write_home(tmp_path)
    settings = Settings(config_path=config, home=tmp_path / "home")
    Graph(settings).build_all()
    # a profile with a new input format is added; the UI route of old skipped embedding_inputs
    text = config.read_text()
    config.write_text(
        text.replace(
            "profiles:\n",
            "profiles:\n  ctx:\n    embedder: hash:v1-32\n    input_format: default-v2\n"
            "    namespace: deals\n",
        )
    )
    g = Graph(settings)
    collections = list(g.config.collections)
    for c in collections:
        assert g.embed("ctx", c).success
    r = g.generation("ctx")
    checks = {ev.check_name: ev for ev in r.get_asset_check_evaluations()}
    reconcile = checks["row_counts_reconcile"]
    assert not reconcile.passed  # 0 rows = 0 inputs is not a reconciliation
    assert "embedding_inputs" in reconcile.metadata["hint"].value  # type: ignore[attr-defined]
    ctx = next(x for x in Registry(settings.registry_path).generations() if x.spec.profile == "ctx")
    assert ctx.status != "READY" and ctx.row_count == 0
    # the operator watching active_generation sees it fail, naming the generation
    r = _active_generation(g, None)
    assert r.success
    (watch,) = r.get_asset_check_evaluations()
    assert watch.check_name == "generations_pass_their_checks" and not watch.passed
    assert watch.severity == dg.AssetCheckSeverity.ERROR
    assert ctx.id in str(watch.metadata["failing_generations"].value)  # type: ignore[attr-defined]
    # the README's route: embedding_inputs for every collection first, then the profile's assets
    for c in collections:
        assert g.materialize(["embedding_inputs"], c).success
        assert g.embed("ctx", c).success
    r = g.generation("ctx")
    assert r.success and metadata(r, "index_generation")["status"] == "READY"
    assert int(metadata(r, "index_generation")["rows"]) > 0  # type: ignore[call-overload]


def test_a_generation_that_served_is_compared_only_when_promoted(tmp_path: Path) -> None:
    config = write_home(
        tmp_path,
        embedder="hash:v1-8",
        extra_profiles={"big": {"embedder": "hash:v1-256", "namespace": "deals"}},
    )
    golden_set(tmp_path)
    configure(config, remote=None)
    settings = Settings(config_path=config, home=tmp_path / "home")
    g = Graph(settings)
    g.build_all()
    registry = Registry(settings.registry_path)
    old, new = registry.generations(namespace="deals")
    promote(Home(settings), "deals", old.id)
    # the migration is done; old is the rollback target (new, built with nothing serving, is
    # compared with old as it is promoted)
    assert _active_generation(g, {"generation": new.id}).success
    assert registry.active("deals").id == new.id  # type: ignore[union-attr]
    # the new ACTIVE generation's recorded figures beat the old one's (this tiny corpus gives
    # both perfect scores, so the baseline is raised: the old generation is now "worse")
    golden = registry.require(new.id).eval["golden"]
    registry.record_eval(new.id, {"golden": {**golden, "recall@5": 2.0, "ndcg@10": 2.0}})
    # a source change reaches the old profile's generation too: no comparison, no failed run
    deal = tmp_path / "sources" / "alpha" / "deal-alpha-000.uw.md"
    deal.write_text(deal.read_text().replace("Phoenix", "Tucson"))
    assert g.ingest("alpha-deals").success and g.embed("main", "alpha-deals").success
    r = g.generation("main")
    assert r.success
    (ev,) = (e for e in r.get_asset_check_evaluations() if e.check_name == EVAL_GATE)
    assert ev.severity == dg.AssetCheckSeverity.WARN and "not compared" in str(ev.description)
    # asked to promote it, it is compared with the ACTIVE one, and refused by name
    r = _active_generation(g, {"generation": old.id})
    assert not r.success
    checks = registry.require(old.id).checks[f"index_generation:{EVAL_GATE}"]
    assert checks["passed"] is False and checks.get("ran") is not False
    assert registry.active("deals").id == new.id  # type: ignore[union-attr]
    # rolling back needs no comparison
    r = _active_generation(g, {"action": "rollback"})
    assert r.success
    assert registry.active("deals").id == old.id  # type: ignore[union-attr]
    # the comparison chart is on the asset the operator watches
    assert "data:image/png;base64" in str(metadata(r, "active_generation")["eval_comparison"])


def test_embeddings_count_the_tokens_plan_migration_counts(home: Settings) -> None:
    g = Graph(home)
    assert g.ingest("alpha-deals").success
    plan = plan_migration(Home(home), "main")
    planned = next(c for c in plan.collections if c.collection == "alpha-deals")
    assert planned.tokens_to_embed > 0
    r = g.embed("main", "alpha-deals")
    assert (
        metadata(r, "embeddings")["tokens"] == planned.tokens_to_embed
    )  # the hash embedder reports none
