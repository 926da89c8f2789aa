"""What a promotion or rollback refuses, leaving the generation that serves in place: a target
whose table is gone, one that failed a check (a rollback's too), one that lags its sources (a
source added or an ACL narrowed since its last index_rows run), a rollback naming another
generation than the one it goes back to, a RETIRED generation (after a restore from the
journal too), an unknown namespace; and a move asked for by a run that shares the home."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from assets import CorpusResource, build_assets
from corpus_index import gates, lifecycle, steps
from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.errors import (
    HomeBusyError,
    HomeHeldSharedError,
    PromotionRefusedError,
)
from corpus_index.home import Home
from corpus_index.homelock import EXCLUSIVE_TAGS, home_lock_of
from corpus_index.registry import Registry, restore_from_journal
from corpus_index.search import Principal, Searcher
from pipelines.partitions import build_partitions
from tests.corpusgen import RISKS, deal_text, write_home
from tests.searchkit import build_home
from tests.support.lockholder import hold
from tests.test_lifecycle import active_id, built, edited, two_generations
from tests.test_registry import OTHER_MODEL, SPEC, ready


def test_a_rollback_to_a_generation_whose_table_is_gone_is_refused(tmp_path: Path) -> None:
    home = two_generations(tmp_path)  # g0002 ACTIVE, g0001 the rollback target
    target = home.registry.require("g0001")
    shutil.rmtree(Path(home.store.uri) / f"{target.table_name}.lance")  # lost
    with pytest.raises(PromotionRefusedError, match="its table .* is not in the store"):
        lifecycle.rollback(home, "deals")
    with pytest.raises(PromotionRefusedError, match="its table .* is not in the store"):
        lifecycle.promote(home, "deals", "g0001")
    assert active_id(home) == "g0002"


@pytest.mark.parametrize("action", ["promote", "rollback"])
def test_a_generation_that_failed_a_check_cannot_serve(tmp_path: Path, action: str) -> None:
    """``group_rows_have_groups`` runs after the write: failed, the table holds group rows
    without their group. A rollback need not have run it (its target may predate it), but one
    that ran and failed is refused as a promotion is."""
    home = two_generations(tmp_path)
    key = gates.check_key("index_rows", "group_rows_have_groups", "alpha-deals")
    assert key in home.registry.require("g0001").checks
    home.registry.record_checks("g0001", {key: {"passed": False, "orphans": "g-lost"}})
    with pytest.raises(PromotionRefusedError, match=re.escape(key)):
        if action == "rollback":
            lifecycle.rollback(home, "deals")
        else:
            lifecycle.promote(home, "deals", "g0001")
    assert active_id(home) == "g0002"


ALT = {"alt": {"embedder": "hash:v1-32", "namespace": "deals"}}
CREDIT = Principal("alpha", ("alpha-credit",))


def _changed_source(home: Home, change: str) -> str:
    """The source that ``change`` (``added``: a new deal; ``narrowed``: deal-alpha-000 taken
    from alpha-credit) touched, ingested; no profile has embedded or indexed it yet."""
    folder = home.settings.config_path.parent / "sources" / "alpha"
    deal = "deal-alpha-new" if change == "added" else "deal-alpha-000"
    (folder / f"{deal}.uw.md").write_text(
        deal_text(deal.upper(), tenant="alpha", acl=["alpha-uw"], units=20, risk=RISKS[0]),
        encoding="utf-8",
    )
    for step in (steps.source_manifest, steps.parsed_blocks, steps.embedding_inputs):
        step.run(home, "alpha-deals")
    return f"alpha-deals/{deal}"


def _indexed(home: Home, profile: str) -> None:
    """A run of ``profile`` for alpha-deals: its generation catches up with the sources."""
    steps.embeddings.run(home, profile, "alpha-deals")
    steps.index_rows.run(home, profile, "alpha-deals", run_id="later")
    steps.index_generation.run(home, profile, run_id="later")


def _credit_sees(home: Home) -> set[str]:
    hits = Searcher(home).search(RISKS[0].lower(), principal=CREDIT, k=10, namespace="deals").hits
    return {h.source_id for h in hits}


@pytest.mark.parametrize("change", ["added", "narrowed"])
def test_a_candidate_lagging_its_sources_is_refused_until_a_run_catches_it_up(
    tmp_path: Path, change: str
) -> None:
    """A source changed while the migration builds reaches the ACTIVE generation; the
    candidate's run for it has not come (or failed). Serving the candidate then would drop the
    new deal, or show deal-alpha-000 to alpha-credit again."""
    home = built(tmp_path, eval_gate="off", extra_profiles=ALT)
    lifecycle.promote(home, "deals", "g0001")  # g0002 (alt) READY beside it
    source = _changed_source(home, change)
    _indexed(home, "main")
    assert home.registry.require("g0002").status == "READY"
    with pytest.raises(PromotionRefusedError) as refused:
        lifecycle.promote(home, "deals", "g0002")
    message = str(refused.value)
    assert "g0002 does not hold the rows the current embedding_inputs of alpha-deals" in message
    assert "run `corpus sync`" in message
    assert lifecycle.lagging_collections(home, home.registry.require("g0001")) == []
    assert active_id(home) == "g0001"
    _indexed(home, "alt")
    assert lifecycle.promote(home, "deals", "g0002").id == "g0002"
    if change == "added":
        assert source in {
            h.source_id
            for h in Searcher(home)
            .search(
                RISKS[0].lower(),
                principal=Principal("alpha", ("alpha-uw",)),
                k=10,
                namespace="deals",
            )
            .hits
        }
    else:
        assert source not in _credit_sees(home)


def test_a_rollback_target_lagging_its_sources_is_refused(tmp_path: Path) -> None:
    """The rollback target's profile still runs: a sync that failed for it left it without an
    ACL narrowed since, which rolling back would widen again."""
    home = two_generations(tmp_path)  # g0002 (alt) ACTIVE, g0001 (main) the rollback target
    source = _changed_source(home, "narrowed")
    _indexed(home, "alt")
    with pytest.raises(PromotionRefusedError, match="g0001 does not hold the rows"):
        lifecycle.rollback(home, "deals")
    assert active_id(home) == "g0002"
    _indexed(home, "main")
    assert lifecycle.rollback(home, "deals").id == "g0001"
    assert source not in _credit_sees(home)


def test_a_migration_abandoned_then_restored_is_refused_until_a_sync(tmp_path: Path) -> None:
    """The candidate's profile is removed (the migration abandoned) while deal-alpha-000 is
    taken from alpha-credit; restored as the refusal says, the candidate still lacks the
    change until a run writes it."""
    home = built(tmp_path, eval_gate="off", extra_profiles=ALT)
    lifecycle.promote(home, "deals", "g0001")
    home = edited(home, lambda raw: raw["profiles"].pop("alt"))
    source = _changed_source(home, "narrowed")
    _indexed(home, "main")
    with pytest.raises(PromotionRefusedError) as refused:
        lifecycle.promote(home, "deals", "g0002")
    assert "restore its profile as it was and run `corpus sync`" in str(refused.value)
    home = edited(home, lambda raw: raw["profiles"].update(ALT))
    with pytest.raises(PromotionRefusedError, match="g0002 does not hold the rows"):
        lifecycle.promote(home, "deals", "g0002")
    assert active_id(home) == "g0001"
    _indexed(home, "alt")
    assert lifecycle.promote(home, "deals", "g0002").id == "g0002"
    assert source not in _credit_sees(home)


def test_a_rollback_naming_another_generation_than_its_step_back_is_refused(
    tmp_path: Path,
) -> None:
    home = two_generations(tmp_path)
    lifecycle.rollback(home, "deals")  # g0001 ACTIVE, previous g0002
    # the asset's config {generation: g0001, action: rollback}: asked to be on g0001
    with pytest.raises(PromotionRefusedError, match="goes back to g0002, not g0001"):
        lifecycle.move_pointer(home, "deals", "g0001", action="rollback")
    with pytest.raises(PromotionRefusedError, match="not g0099"):
        lifecycle.move_pointer(home, "deals", "g0099", action="rollback")
    assert active_id(home) == "g0001"
    # naming the step back itself is a rollback
    assert lifecycle.move_pointer(home, "deals", "g0002", action="rollback").moved
    assert active_id(home) == "g0002"


def test_a_retired_generation_is_refused_with_a_remedy_that_applies(tmp_path: Path) -> None:
    extra = {
        "alt": {"embedder": "hash:v1-32", "namespace": "deals"},
        "third": {"embedder": "hash:v1-48", "namespace": "deals"},
    }
    home = built(tmp_path, eval_gate="off", extra_profiles=extra)
    for g in ("g0001", "g0002", "g0003"):
        lifecycle.promote(home, "deals", g)
    home = edited(home, lambda raw: raw["namespaces"]["deals"].update(retire_after_hours=0))
    lifecycle.retire(home, "g0001")
    with pytest.raises(PromotionRefusedError) as refused:
        lifecycle.promote(home, "deals", "g0001")
    assert "g0001 is RETIRED: its table was dropped" in str(refused.value)
    assert "restore its profile" not in str(refused.value)
    assert active_id(home) == "g0003"


def test_a_retired_generation_stays_retired_after_a_restore_from_the_journal(
    tmp_path: Path,
) -> None:
    path = tmp_path / "home" / "registry.duckdb"
    reg = Registry(path)
    third = dataclasses.replace(SPEC, backend_spec="hash:v1-48", dim=48)
    g1, g2, g3 = ready(reg, SPEC), ready(reg, OTHER_MODEL), ready(reg, third)
    for g in (g1, g2, g3):
        reg.promote(g)  # g3 ACTIVE, g2 the rollback target
    reg.retire(g1, window_hours=0)
    path.unlink()  # lost; `corpus doctor --repair` restores it from the journal
    restored = Registry(path)
    restore_from_journal(restored)
    assert restored.require(g1).status == "RETIRED"
    with pytest.raises(PromotionRefusedError):
        restored.promote(g1)


def test_a_bare_promote_skips_a_generation_no_profile_builds(tmp_path: Path) -> None:
    config = write_home(
        tmp_path,
        eval_gate="off",
        extra_profiles={"alt": {"embedder": "hash:v1-32", "namespace": "deals"}},
    )
    home = build_home(Settings(config_path=config, home=tmp_path / "home"), promote=False)
    lifecycle.promote(home, "deals", "g0001")  # g0002 (alt) READY beside it
    home = edited(home, lambda raw: raw["profiles"].pop("alt"))  # the migration abandoned
    assert lifecycle.promote(home, "deals").id == "g0001"
    assert active_id(home) == "g0001"


@pytest.mark.parametrize("command", ["rollback", "promote"])
def test_an_unknown_namespace_is_named(tmp_path: Path, command: str) -> None:
    home = built(tmp_path, eval_gate="off")
    lifecycle.promote(home, "deals")
    base = ["--config", str(home.settings.config_path), "--home", str(home.settings.home)]
    result = CliRunner().invoke(main, [*base, command, "--namespace", "dels"])
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "no namespace 'dels' is configured" in result.output


def test_a_move_asked_for_inside_a_shared_hold_is_refused(tmp_path: Path) -> None:
    """A step of a run beside other runs holds the home shared; a promotion needs it alone,
    and its hold cannot be raised in place (granted, the pointer would move beside them)."""
    home = two_generations(tmp_path)
    shared = home_lock_of(home.settings, "run 5678 of an asset job", shared=True)
    with shared, pytest.raises(HomeHeldSharedError, match="needs .* alone"):
        lifecycle.rollback(home, "deals")
    assert active_id(home) == "g0002"


def test_a_rollback_run_where_runs_share_the_home_waits_for_the_others(tmp_path: Path) -> None:
    """CORPUS_EXECUTOR=multiprocess: runs share the home. The rollback job (tagged to hold the
    home alone) waits for a run in flight; an untagged run asking for it is refused."""
    home = two_generations(tmp_path)
    resource = CorpusResource(
        config_path=str(home.settings.config_path),
        home=str(home.settings.home),
        lock_wait_s=1.0,
        runs_share_home=True,
    )
    assets = build_assets(build_partitions(home.config))

    def rollback(tags: dict[str, str]) -> dg.ExecuteInProcessResult:
        return dg.materialize(
            assets,
            selection=["active_generation"],
            partition_key="deals",
            resources={"corpus": resource},
            run_config={"ops": {"active_generation": {"config": {"action": "rollback"}}}},
            tags=tags,
            raise_on_error=False,
        )

    other_run = hold(home.settings.home, 60, "run 1234abcd of embed_job", shared=True)
    try:
        untagged = rollback({})
        assert not untagged.success and active_id(home) == "g0002"
        waited = rollback(EXCLUSIVE_TAGS)  # waits its lock_wait_s, then gives up
        assert not waited.success and active_id(home) == "g0002"
        assert any(
            HomeBusyError.__name__ in str(e.event_specific_data)
            for e in waited.all_events
            if e.is_failure
        )
    finally:
        other_run.kill()
        other_run.wait()
    assert rollback(EXCLUSIVE_TAGS).success
    assert active_id(home) == "g0001"
