"""Promotion and the eval gate: a namespace with no golden set must say `eval_gate: off`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from corpus_index import doctor, gates, lifecycle
from corpus_index.config import Settings
from corpus_index.deletion import propagate_deletion
from corpus_index.doctor import generation_problem
from corpus_index.errors import (
    ActiveMismatchError,
    ConfigError,
    HomeBusyError,
    MissingGenerationError,
    PromotionRefusedError,
    RetireRefusedError,
)
from corpus_index.home import Home
from corpus_index.search import Principal, Searcher
from corpus_index.steps.eval_gate import run_eval_gate
from tests.corpusgen import RISKS, write_home
from tests.searchkit import build_home
from tests.support.lockholder import hold

EVAL_CHECK = gates.check_key("index_generation", gates.EVAL_GATE)


def built(
    root: Path,
    *,
    eval_gate: str | None,
    golden: bool = False,
    extra_profiles: dict[str, dict[str, object]] | None = None,
) -> Home:
    config = write_home(root, eval_gate=eval_gate, extra_profiles=extra_profiles)
    if golden:
        raw = yaml.safe_load(config.read_text())
        raw["namespaces"]["deals"]["golden_set"] = "golden.yaml"
        config.write_text(yaml.safe_dump(raw, sort_keys=False))
        query = {
            "id": "q1",
            "tenant": "alpha",
            "groups": ["alpha-uw"],
            "text": RISKS[0].lower(),
            "relevant": [
                {
                    "source_id": "alpha-deals/deal-alpha-000",
                    "section": "risk_assessment",
                    "grade": 2,
                }
            ],
        }
        (root / "golden.yaml").write_text(yaml.safe_dump({"queries": [query]}))
    return build_home(Settings(config_path=config, home=root / "home"), promote=False)


def test_without_a_golden_set_the_eval_gate_is_not_run_and_promotion_is_refused(
    tmp_path: Path,
) -> None:
    home = built(tmp_path, eval_gate=None)
    gen = home.registry.generations(namespace="deals")[-1]
    assert gen.status == "READY"  # built and every integrity gate passed
    assert gates.not_run(gen.checks[EVAL_CHECK]) and not gen.checks[EVAL_CHECK]["passed"]
    with pytest.raises(PromotionRefusedError) as refused:
        lifecycle.promote(home, "deals")
    message = str(refused.value)
    assert "namespace 'deals'" in message and "eval_gate: off" in message
    assert str(home.config.path) in message
    assert home.registry.active("deals") is None


def test_eval_gate_off_promotes_without_a_golden_set(tmp_path: Path) -> None:
    home = built(tmp_path, eval_gate="off")
    gen = lifecycle.promote(home, "deals")
    assert gen.status == "ACTIVE" and home.registry.active("deals") == gen
    # still on record as not run, for `corpus generations` to show
    assert gates.not_run(gen.checks[EVAL_CHECK])
    assert "NOT RUN: " + EVAL_CHECK in gates.check_summary(gen.checks)
    assert EVAL_CHECK not in lifecycle.required_checks(home, "main")


def test_a_namespace_with_a_golden_set_runs_and_requires_the_eval_gate(tmp_path: Path) -> None:
    home = built(tmp_path, eval_gate=None, golden=True)
    assert EVAL_CHECK in lifecycle.required_checks(home, "main")
    gen = home.registry.generations(namespace="deals")[-1]
    recorded = gen.checks[EVAL_CHECK]
    assert not gates.not_run(recorded) and recorded["passed"] and recorded["queries"] == 1
    assert lifecycle.promote(home, "deals").status == "ACTIVE"


def test_eval_gate_accepts_on_and_off_only(tmp_path: Path) -> None:
    config = write_home(tmp_path, eval_gate="sometimes")
    with pytest.raises(ConfigError, match=r"namespaces\.deals\.eval_gate: must be one of on, off"):
        Settings(config_path=config, home=tmp_path / "home").load()
    for value, expected in (("on", True), ("off", False)):
        config = write_home(tmp_path, eval_gate=value)
        loaded = Settings(config_path=config, home=tmp_path / "home").load()
        assert loaded.namespaces["deals"].eval_gate is expected
    bare = tmp_path / "bare.yaml"  # YAML 1.1 reads a bare off as False
    bare.write_text(config.read_text().replace("eval_gate: 'off'", "eval_gate: off"))
    assert "eval_gate: off" in bare.read_text()
    assert (
        Settings(config_path=bare, home=tmp_path / "home").load().namespaces["deals"].eval_gate
        is False
    )


def test_promotion_refuses_while_a_sync_of_the_home_is_in_flight(tmp_path: Path) -> None:
    home = built(tmp_path, eval_gate="off")
    sync = hold(home.settings.home, 30)
    try:
        with pytest.raises(HomeBusyError) as busy:
            lifecycle.promote(home, "deals")
        message = str(busy.value)
        assert f"home {home.settings.home} is busy" in message
        assert f"pid {sync.pid} (sync)" in message
        assert home.registry.active("deals") is None  # nothing moved
    finally:
        sync.kill()
        sync.wait()
    assert lifecycle.promote(home, "deals").status == "ACTIVE"


def test_promotion_waits_for_a_sync_in_flight_when_asked(tmp_path: Path) -> None:
    home = built(tmp_path, eval_gate="off")
    sync = hold(home.settings.home, 1.0)
    assert lifecycle.promote(home, "deals", wait_s=60).status == "ACTIVE"
    assert sync.wait(timeout=60) == 0


def two_generations(root: Path) -> Home:
    """g0001 (profile main) then g0002 (profile alt) promoted in namespace deals."""
    config = write_home(
        root,
        eval_gate="off",
        extra_profiles={"alt": {"embedder": "hash:v1-32", "namespace": "deals"}},
    )
    home = build_home(Settings(config_path=config, home=root / "home"))
    assert active_id(home) == "g0002" and home.registry.previous("deals").id == "g0001"  # type: ignore[union-attr]
    return home


def active_id(home: Home) -> str:
    gen = home.registry.active("deals")
    return gen.id if gen else ""


def test_a_retried_rollback_that_committed_is_a_no_op(tmp_path: Path) -> None:
    home = two_generations(tmp_path)
    first = lifecycle.move_pointer(home, "deals", action="rollback", expect_active="g0002")
    assert first.moved and first.generation.id == "g0001" and active_id(home) == "g0001"
    moves = len(home.registry.history("deals"))
    retry = lifecycle.move_pointer(home, "deals", action="rollback", expect_active="g0002")
    assert not retry.moved and retry.generation.id == "g0001"
    assert "already moved from g0002 to g0001" in retry.note and "nothing changed" in retry.note
    assert active_id(home) == "g0001" and len(home.registry.history("deals")) == moves
    assert lifecycle.rollback(home, "deals", expect_active="g0002").id == "g0001"
    assert active_id(home) == "g0001"


def test_a_retried_promotion_that_committed_is_a_no_op(tmp_path: Path) -> None:
    home = two_generations(tmp_path)
    lifecycle.rollback(home, "deals")
    assert lifecycle.move_pointer(home, "deals", "g0002", expect_active="g0001").moved
    retry = lifecycle.move_pointer(home, "deals", "g0002", expect_active="g0001")
    assert not retry.moved and retry.generation.id == "g0002" and active_id(home) == "g0002"


def test_an_unexpected_active_generation_is_refused(tmp_path: Path) -> None:
    home = two_generations(tmp_path)
    moves = len(home.registry.history("deals"))
    with pytest.raises(ActiveMismatchError) as refused:
        lifecycle.rollback(home, "deals", expect_active="g0001")
    message = str(refused.value)
    assert "serves g0002, not g0001" in message and "nothing changed" in message
    # a different promotion than the last move is no retry either
    with pytest.raises(ActiveMismatchError):
        lifecycle.promote(home, "deals", "g0001", expect_active="g0001")
    assert active_id(home) == "g0002" and len(home.registry.history("deals")) == moves


def test_promotion_needs_every_collections_group_rows_check(tmp_path: Path) -> None:
    home = built(tmp_path, eval_gate="off")
    gen = home.registry.generations(namespace="deals")[-1]
    keys = {
        gates.check_key("index_rows", "group_rows_have_groups", c.name)
        for c in home.config.collections_in("deals")
    }
    assert keys <= lifecycle.required_checks(home, "main")
    assert not keys & lifecycle.required_checks(home, "main", for_rollback=True)
    assert all(gen.checks[k]["passed"] for k in keys)  # index_rows recorded it for each
    failed = sorted(keys)[0]
    home.registry.record_checks(gen.id, {failed: {"passed": False, "orphans": "g-lost"}})
    with pytest.raises(PromotionRefusedError) as refused:
        lifecycle.promote(home, "deals")
    assert failed in str(refused.value)
    assert home.registry.active("deals") is None


def edited(home: Home, edit: Callable[[dict[str, Any]], None]) -> Home:
    """The home again after ``edit`` changed its corpus.yaml."""
    raw = yaml.safe_load(home.settings.config_path.read_text())
    edit(raw)
    home.settings.config_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return Home(home.settings)


def test_a_generation_its_profile_no_longer_writes_is_not_searched(tmp_path: Path) -> None:
    """An ACL narrowed after a migration reaches only the generations a profile still writes:
    the old one, named, would show the unit to the group it was taken from."""
    home = two_generations(tmp_path)
    reader = Principal("alpha", ("alpha-uw",))
    ask = {"principal": reader, "namespace": "deals", "mode": "lexical", "k": 3}
    assert Searcher(home).search("lease", generation="g0001", **ask).hits  # both written
    home.registry.set_status("g0001", "FAILED")
    with pytest.raises(MissingGenerationError, match="g0001 is FAILED"):
        Searcher(home).search("lease", generation="g0001", **ask)
    home.registry.set_status("g0001", "READY")
    home = edited(home, lambda raw: raw["profiles"].pop("main"))
    with pytest.raises(MissingGenerationError, match="g0001 was built by profile 'main'"):
        Searcher(home).search("lease", generation="g0001", **ask)
    assert Searcher(home).search("lease", **ask).hits  # g0002 serves


def test_an_active_generation_its_profile_no_longer_writes_is_not_searched(
    tmp_path: Path,
) -> None:
    """A profile changed in place writes a new generation; until it is promoted, the ACTIVE one
    no longer takes its sources' edits, so the namespace is refused, naming what to do."""
    home = two_generations(tmp_path)
    home = edited(home, lambda raw: raw["profiles"]["alt"].update(embedder="hash:v1-48"))
    ask = {"principal": Principal("alpha", ("alpha-uw",)), "namespace": "deals", "k": 3}
    with pytest.raises(MissingGenerationError) as refused:
        Searcher(home).search("lease", mode="lexical", **ask)
    message = str(refused.value)
    assert "profile 'alt' now builds another generation than g0002" in message
    assert "promote a generation" in message
    assert Searcher(home).search("lease", mode="lexical", generation="g0001", **ask).hits


def test_a_rollback_target_its_profile_no_longer_writes_is_refused_and_can_be_retired(
    tmp_path: Path,
) -> None:
    home = two_generations(tmp_path)  # g0002 ACTIVE, g0001 (profile main) the rollback target
    with pytest.raises(RetireRefusedError, match="rollback target"):
        lifecycle.retire(
            edited(home, lambda raw: raw["namespaces"]["deals"].update(retire_after_hours=0)),
            "g0001",
        )

    def changed(raw: dict[str, Any]) -> None:
        raw["profiles"]["main"]["embedder"] = "hash:v1-48"
        raw["namespaces"]["deals"]["retire_after_hours"] = 0

    home = edited(home, changed)
    with pytest.raises(PromotionRefusedError, match="now builds another generation than g0001"):
        lifecycle.rollback(home, "deals")
    with pytest.raises(PromotionRefusedError, match="no longer reach it"):
        lifecycle.promote(home, "deals", "g0001")
    assert active_id(home) == "g0002"
    assert [c.generation for c in lifecycle.retire_choices(home.settings)][:1] == ["g0001"]
    assert lifecycle.retire(home, "g0001").generation.status == "RETIRED"


def test_a_deletion_keeps_the_row_count_of_a_generation_no_profile_writes(tmp_path: Path) -> None:
    """Deletions reach every generation; the count its health is judged by follows, so one
    its profile no longer writes is not reported damaged (nor dropped by a repair)."""
    home = edited(two_generations(tmp_path), lambda raw: raw["profiles"].pop("main"))
    old = home.registry.require("g0001")
    assert home.unmaintained(old) is not None and home.store.count(old) == old.row_count
    receipt = propagate_deletion(
        home, "alpha-deals", ["alpha-deals/deal-alpha-000"], namespace="deals", reason="test"
    )
    assert receipt is not None
    old = home.registry.require("g0001")
    assert home.store.count(old) == old.row_count
    assert generation_problem(home.store, old) is None
    assert doctor.check(home.settings) == []


def test_doctor_never_drops_a_damaged_generation_no_sync_can_rebuild(tmp_path: Path) -> None:
    home = edited(two_generations(tmp_path), lambda raw: raw["profiles"].pop("main"))
    table = Path(home.settings.lance_uri) / f"{home.registry.require('g0001').table_name}.lance"
    for data in (table / "data").iterdir():  # its rows' files lost
        data.unlink()
    found = doctor.check(home.settings)
    assert [(f.kind, f.name) for f in found] == [("unmaintained", "g0001")]
    assert "no sync rebuilds it" in found[0].repair and "corpus retire g0001" in found[0].repair
    doctor.repair(home.settings, found)
    assert home.store.exists(home.registry.require("g0001"))


def test_the_eval_gate_compares_with_the_active_rows_as_they_are_now(tmp_path: Path) -> None:
    """A deletion reaches the ACTIVE generation and the candidate alike: the candidate is
    compared with the ACTIVE one asked again over its rows now, not with figures from before."""
    alt = {"alt": {"embedder": "hash:v1-32", "namespace": "deals"}}
    home = built(tmp_path, eval_gate=None, golden=True, extra_profiles=alt)
    lifecycle.promote(home, "deals", "g0001")
    before = home.registry.require("g0001").eval["golden"]
    assert before["ndcg@10"] > 0.5  # the one judged deal is found
    propagate_deletion(
        home, "alpha-deals", ["alpha-deals/deal-alpha-000"], namespace="deals", reason="test"
    )
    gate, metrics = run_eval_gate(home, home.registry.require("g0002"), candidate=True)
    assert metrics["ndcg@10"] == 0.0  # gone from the candidate too
    assert gate.passed, gate.metadata
    assert gate.metadata["active_ndcg@10"] == 0.0
    assert home.registry.require("g0001").eval["golden"]["table_version"] > before["table_version"]


def test_a_check_failed_just_before_the_pointer_moves_refuses_the_promotion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync that records a check failed while a promotion is under way (after the promotion
    looked at the generation, before its transaction) refuses it: the status and checks that
    decide are read inside the transaction that moves the pointer."""
    home = built(tmp_path, eval_gate="off")
    gen = home.registry.generations(namespace="deals")[-1]
    failed = sorted(lifecycle.required_checks(home, "main"))[0]
    backend = home.registry.backend
    real_connect = backend.connect
    raced: list[str] = []

    class Racing:
        """A registry connection whose transaction starts just after another writer
        recorded the check failed (once)."""

        def __init__(self, con: Any) -> None:
            self._con = con

        def execute(self, sql: str, *args: Any) -> Any:
            if sql == "BEGIN TRANSACTION" and not raced:
                raced.append(gen.id)
                home.registry.record_checks(gen.id, {failed: {"passed": False, "why": "race"}})
            return self._con.execute(sql, *args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._con, name)

    @contextlib.contextmanager
    def racing_connect(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with real_connect(*args, **kwargs) as con:
            yield Racing(con)

    monkeypatch.setattr(backend, "connect", racing_connect)
    with pytest.raises(PromotionRefusedError) as refused:
        lifecycle.promote(home, "deals", gen.id)
    assert raced == [gen.id] and failed in str(refused.value)
    monkeypatch.undo()
    assert home.registry.active("deals") is None
